"""One builder for every destructive DAG: a kind says what it plans and how a part of its plan is executed, and
`destructive_dag` wires the same steps, in the same order, for all of them:

    planning (the kind's tasks; the first fixes the run's plan) -> gate -> execution -> drain -> report

- **gate**: `deletion_gate`, after every planning task the kind names (`Planned.gate_after`).
- **execution**: `plan_parts` then the kind's `execute` mapped over the parts (`Execution.mapped`), or one task
  over the whole plan, or, for a plan of objects alone, `owe_planned_objects` (the drain deletes them). Whatever
  runs it, it executes only a plan the gate let through (`blobgc.core.plans.check_may_execute`, checked by the
  code that reads the plan's items, not by this wiring).
- **drain**: `delete_owed_objects` after the execution (and `retry_owed_objects` before it, for a kind that
  drains earlier runs' debts first), then `purge_cache_keys` for a kind that owes Redis keys.
- **report**: `report_parts` (`report_run`), even when the gate refused, with `execution_report` as "plan" and the
  kind's own summaries.

A DAG file declares its kind, Params, schedule, tags and `doc_md`, and calls `destructive_dag`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import psycopg

from blobgc.core.outbox import DrainResult
from blobgc.core.plans import OwedFromPlan, execution_report
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef
from blobgc.dag_kit.gate import deletion_gate
from blobgc.dag_kit.params import dag_defaults
from blobgc.dag_kit.steps import (
    drain_owed_objects,
    gc_step,
    list_plan_parts,
    owe_planned_objects,
    purge_owed_cache_keys,
    report_parts,
)

NONE_FAILED = "none_failed"
BUILT_BY = "blobgc_built_by"  # the attribute of a DAG that names the builder that wired it


@dataclass(frozen=True)
class Planned:
    """What a kind's planning tasks give the builder: the task(s) the gate follows, and the results the report
    gathers, by name (each an XComArg of a planning task)."""

    gate_after: Any
    report: dict[str, Any]


@dataclass(frozen=True)
class Execution:
    """How a kind executes its plan once the gate let it through: `execute(step, part)` mapped over the plan's parts
    (`mapped`), or `execute(step)` once over the whole plan; its result goes to the report as `name`."""

    execute: Callable[..., TaskResult]
    name: str
    result: type[TaskResult]
    task_id: str | None = None  # the function's name when None
    map_index_template: str | None = None


@dataclass(frozen=True)
class Kind:
    """A kind of planned deletion, as a destructive DAG is built from it (`destructive_dag`).

    `planning` builds the kind's planning tasks inside the DAG (its first task fixes the run's plan with
    `fix_run_plan`) and returns `Planned`; `planned` gives the type of each result it reports. `execution` None:
    the plan is objects alone, owed to the drain (`owe_planned_objects`)."""

    planning: Callable[[], Planned]
    planned: dict[str, type[TaskResult]]
    execution: Execution | None = None
    mapped: bool = True  # the execution is one task per part of the plan (else one task over the whole plan)
    catch_up_drain: bool = False  # retry_owed_objects: earlier runs' debts drained before this run executes
    cache_keys: bool = False  # purge_cache_keys after the execution: the kind owes Redis keys
    drain_trigger_rule: str | None = None  # "none_failed": drain even when the execution had no part to run
    summaries: dict[str, Callable[[psycopg.Connection, RunRef], dict]] = field(default_factory=dict)
    extra_counters: tuple[str, ...] = ()


def destructive_dag(
    dag_id: str,
    *,
    kind: Kind,
    schedule: Any,
    params: dict[str, Any],
    tags: list[str],
    doc_md: str | None,
    receipt_path: Callable[[str, str], str],
) -> Any:
    """The DAG `dag_id`, wired from `kind` (see the module docstring). `receipt_path(dag_id, run_id)` is where a
    run's receipt page is (`blobgc.reclaim.routes.receipt_path`): the gate links the plan it asks about there."""
    from airflow.sdk import dag

    @dag(dag_id=dag_id, schedule=schedule, **dag_defaults(), params=params, tags=tags, doc_md=doc_md)
    def build() -> None:
        planned = kind.planning()
        gate = deletion_gate(trigger_rule=NONE_FAILED, receipt_path=receipt_path)
        planned.gate_after >> gate
        executed, name, result = execution(kind, gate)
        objects = drain_owed_objects(**trigger(kind.drain_trigger_rule))()
        executed >> objects
        results: dict[str, Any] = {**planned.report, name: executed, "objects": objects}
        types: dict[str, type[TaskResult]] = {**kind.planned, name: result, "objects": DrainResult}
        if kind.cache_keys:
            from blobgc.core.cache_purge import PurgeResult

            results["cache"] = purge_owed_cache_keys(**trigger(kind.drain_trigger_rule))()
            types["cache"] = PurgeResult
            executed >> results["cache"]
        report_parts(
            types,
            trigger_rule=NONE_FAILED,
            summaries={**kind.summaries, "plan": execution_report},
            extra_counters=kind.extra_counters,
        )(**results)

    built = build()
    setattr(built, BUILT_BY, "destructive_dag")
    return built


def execution(kind: Kind, gate: Any) -> tuple[Any, str, type[TaskResult]]:
    """The kind's execution tasks after `gate`: (the task whose result is reported, its name, its type)."""
    ex = kind.execution
    if ex is None:
        owed = owe_planned_objects()()
        gate >> owed
        return owed, "owed", OwedFromPlan
    task_kwargs: dict[str, Any] = {"task_id": ex.task_id} if ex.task_id else {}
    if ex.map_index_template:
        task_kwargs["map_index_template"] = ex.map_index_template
    task = gc_step(**task_kwargs)(ex.execute)
    if not kind.mapped:
        executed = task()
        gate >> executed
        return executed, ex.name, ex.result
    parts = list_plan_parts()()
    gate >> parts
    executed = task.expand(part=parts)
    if kind.catch_up_drain:  # earlier runs' debts first, so that this run's delete tasks start from a settled outbox
        parts >> drain_owed_objects("retry_owed_objects", fail_on_parked=False)() >> executed
    return executed, ex.name, ex.result


class TaskTrigger(TypedDict, total=False):
    """A step's trigger_rule, given only when the kind sets one (Airflow's default otherwise)."""

    trigger_rule: str


def trigger(rule: str | None) -> TaskTrigger:
    return {"trigger_rule": rule} if rule else {}
