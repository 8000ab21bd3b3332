"""One task of an existing DAG run, run again by hand: what a person does with `airflow tasks test <dag> <task>
<run_id>` (or by clearing the task and forcing it past its upstream states). The task goes through Airflow's own
task runner (`_run_task`, as `airflow tasks test` and `dag.test()` use it) in this process, against the stack's
metadata database, whatever state its upstream tasks are in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.helpers import ROOT, _environment, _everything_printed, _pause, dag_lock


@dataclass(frozen=True)
class TaskByHand:
    """What running a task by hand did: its final state and everything printed."""

    state: str | None
    output: str


def run_task_by_hand(dag_id: str, task_id: str, run_id: str, *, map_index: int = -1,
                     mapped_input: dict[str, Any] | None = None,
                     env_extra: dict[str, str] | None = None) -> TaskByHand:
    """Run `task_id` of run `run_id` again, as `airflow tasks test` does.

    A mapped task's instance `map_index` takes `mapped_input` (its expanded arguments, which Airflow would read
    from the upstream task's XCom) instead: for a run in which that upstream task never ran.
    """
    from airflow.cli.commands.task_command import _get_ti
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization

    with _environment(env_extra or {}), _everything_printed() as printed, dag_lock(dag_id, shared=True):
        bag = DagBag(dag_folder=str(ROOT / "dags" / f"{dag_id}.py"))
        if dag_id not in bag.dags:
            raise RuntimeError(f"{dag_id} did not parse: {bag.import_errors}")
        _pause(dag_id)
        dag = bag.dags[dag_id]
        scheduler_dag = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # as `airflow tasks test` does
        ti, _created = _get_ti(scheduler_dag.get_task(task_id), map_index, logical_date_or_run_id=run_id,
                               create_if_necessary="db")
        task = dag.get_task(task_id)
        if mapped_input is not None:
            task = task.unmap({"op_kwargs": mapped_input})
        _run_task(ti=ti, task=task)
        state = getattr(ti.state, "value", ti.state)  # "failed", "success", ...
    return TaskByHand(state, printed["output"])
