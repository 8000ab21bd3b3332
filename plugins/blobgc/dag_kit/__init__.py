"""The Airflow layer: the one place that knows Airflow. DAG files are wiring over it.

- `params`: pools, default task arguments, the deleting DAGs' Params (docs/reference.md §4);
- `connections` and `variables`: clients and settings from Airflow connections and Variables;
- `steps`: `gc_step` (a collecting task: context values in as arguments, a typed result out) and the
  steps every DAG shares: `drain_owed_objects`, `purge_owed_cache_keys`, `report_run`;
- `builder`: `destructive_dag`, the one builder of every destructive DAG, from a kind's planned deletion (a
  `blobgc.engine.Deletion`): it wires the engine's steps (plan, gate, execution, drain and report) once;
  imported from `blobgc.dag_kit.builder` itself;
- `collections`: the collections file as the collectors of collections read it (`FILE`);
- `gate`: the gate on unusual deletions (`deletion_gate`, a human-in-the-loop ApprovalOperator);
- `notify`: the failure alert every task has as `on_failure_callback` (Variable `blobgc_notify`);
- `worker_identity`: the hostname a local Celery worker reports.

Nothing here runs at DAG-parse time but Param definitions. The names below are imported on first
use, so that Airflow's own processes, which import `worker_identity` for `[core] hostname_callable`,
load nothing else of blobgc (and a new deployment of the library is not shadowed by an old copy
already imported into the scheduler).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "HTTP_POOL": "params",
    "S3_POOL": "params",
    "dag_defaults": "params",
    "default_args": "params",
    "deleting_params": "params",
    "destructive_params": "params",
    "plan_params": "params",
    "deletion_gate": "gate",
    "Step": "steps",
    "drain_owed_objects": "steps",
    "failing_fast": "steps",
    "gc_step": "steps",
    "purge_owed_cache_keys": "steps",
    "report_run": "steps",
    "BlobgcFailureNotifier": "notify",
    "check_notify_variable": "notify",
    "failure_notifier": "notify",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    # A long-running Airflow process (the dag-processor, which imports `worker_identity`) keeps the copy of this
    # module it loaded first: a name a newer blobgc added is then missing from its _EXPORTS. Its DAG-file parsers
    # find it in the submodules (loaded fresh) instead of failing to import the DAG.
    for module in dict.fromkeys(_EXPORTS.values()):
        found = getattr(importlib.import_module(f"{__name__}.{module}"), name, None)
        if callable(found) and not name.startswith("_"):
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
