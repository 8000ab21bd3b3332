"""blobgc's DAGs, shipped in the package: a DAG folder enables each one with a two-line file.

Every DAG is opt-in. A deployment's DAG folder holds one short file per DAG it wants, named after the
DAG (docs/reference.md §4: `dags/<dag_id>.py`), e.g. `dags/blobgc_sweep.py`:

    from blobgc.dags import load  # airflow DAG from the installed blobgc package
    dag = load("blobgc_sweep")

`python -m blobgc.dags install DAGS_FOLDER blobgc_mark blobgc_sweep ...` writes those files
(`python -m blobgc.dags list` names the DAGs). `load` runs the DAG's module afresh on every parse, so
each parse reads the deployment's settings anew (BLOBGC_TASK_RETRIES, ...) and an upgraded package
takes effect at the next parse, with no stale copy cached in a long-lived process. Airflow records
the DAG folder's file as the DAG's file, as for any DAG built by a function it calls.
"""

from __future__ import annotations

import runpy
from typing import TYPE_CHECKING

from blobgc.kinds import KINDS

if TYPE_CHECKING:
    from airflow.sdk import DAG

# dag_id -> what it collects (its tables are checked by its first task, never at import): the DAGs of every
# collection, here, then each kind's own, defined in its folder (blobgc/kinds/<kind>/dag.py)
COLLECTION_DAG_SUMMARIES: dict[str, str] = {
    "blobgc_mark": "marks the rows of every collection unused or used, from every reference (docs/reference.md §6)",
    "blobgc_sweep": "deletes rows of every collection unused for longer than their grace, then their objects",
    "blobgc_reconcile": "lists the buckets and deletes objects no row accounts for, older than an age floor",
    "blobgc_restore": "undoes one run's deletions on a versioned bucket",
}
KIND_DAGS = {dag_id: needs for kind in KINDS for dag_id, needs in kind.dags.items() if needs.module}
DAGS: dict[str, str] = COLLECTION_DAG_SUMMARIES | {dag_id: needs.summary for dag_id, needs in KIND_DAGS.items()}
# dag_id -> the module that defines it
DAG_MODULES: dict[str, str] = {dag_id: f"{__name__}.{dag_id}" for dag_id in COLLECTION_DAG_SUMMARIES} | {
    dag_id: str(needs.module) for dag_id, needs in KIND_DAGS.items()
}
# What a team with only its own collections enables.
COLLECTION_DAGS = ("blobgc_mark", "blobgc_sweep", "blobgc_reconcile", "blobgc_restore")


def shipped(dag_id: str) -> str:
    """`dag_id`, if blobgc ships that DAG; ValueError naming the ones it ships otherwise."""
    if dag_id not in DAGS:
        raise ValueError(f"blobgc ships no DAG {dag_id!r}; it ships: {', '.join(DAGS)}")
    return dag_id


def load(dag_id: str) -> DAG:
    """Build the DAG `dag_id` afresh from the package (call it at the top level of a DAG file)."""
    shipped(dag_id)
    return runpy.run_module(DAG_MODULES[dag_id], run_name=DAG_MODULES[dag_id])["dag"]


def dag_file(dag_id: str) -> str:
    """The text of the DAG-folder file that enables `dag_id` (the words 'airflow' and 'DAG' let Airflow's
    safe-mode parser pick it up)."""
    shipped(dag_id)
    return (
        f'"""{dag_id}: {DAGS[dag_id]}.\n\n'
        f'Defined in the blobgc package ({DAG_MODULES[dag_id]}); this file enables it.\n"""\n'
        f"from blobgc.dags import load  # airflow DAG from the installed blobgc package\n\n"
        f'dag = load("{dag_id}")\n'
    )
