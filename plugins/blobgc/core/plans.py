"""Plans: exactly what a run deletes, made before anything is deleted, judged by the gate, then executed.

A *plan* is a run's list of what it would delete, item by item (`blobgc.plan_item`: a batch of rows and the
objects they own, or of orphan objects, with sizes), kept under the id of the run that made it.

- A **dry run** makes its plan and stops. Its plan stays, so that a later real run can execute it.
- A **real run** first fixes which plan it executes (`fix_plan`): its own, made by its planning tasks, or
  the dry run named by Param `from_plan`. Such a plan must be a dry run of the same DAG, finished, made
  less than `plan_max_age_hours` ago, and not executed by any other run.
- **The gate** (`blobgc.core.gate.judge`, its policy) compares the plan's objects and bytes with the trailing
  median of the DAG's (and each collection's) last real runs. Past `ratio` times the median, and past the
  floors, the run waits for a person (`blobgc.dag_kit.gate`). Every judgement and decision is kept in
  `blobgc.gate_decision`, with who decided.
- **Execution** deals with each item once (`blobgc.plan_outcome`, in the transaction that does the work,
  so that a retry skips what is done). It re-checks every item at delete time. An item referenced again
  since the plan was made is skipped and recorded, never deleted, and nothing outside the plan is
  touched. `check_may_execute`, called before the first item of every execution (`pending_items`), refuses
  anything the gate has not let through or that expired meanwhile, whoever executes it: a task an operator
  cleared by hand, a DAG wired wrongly, a test, a bench.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

import psycopg
from psycopg.rows import dict_row

from blobgc.core import queries, registry
from blobgc.core.outbox import record_deletions
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, add_counts, restart_dry_run_part, set_counts
from blobgc.core.settings import ConfigurationError
from blobgc.core.sizes import human_bytes

log = logging.getLogger(__name__)

PLAN_MAX_AGE_HOURS = 24  # Param plan_max_age_hours's default
APPROVAL_TIMEOUT_HOURS = 12  # Param approval_timeout_hours's default
PASSED, WAITING, APPROVED, REJECTED, TIMED_OUT = "passed", "waiting", "approved", "rejected", "timed_out"
GOES_ON = (PASSED, APPROVED)
PAGE = 100  # plan items read at a time


class PlanRefused(ConfigurationError):
    """A plan that may not be executed (missing, not a dry run, expired, executed already): no retry helps."""


class GateClosed(ConfigurationError):
    """The gate has not let this run's plan through (waiting, rejected or timed out): nothing may be deleted."""


# --------------------------------------------------------------------------------------------- the plan
def fix_plan(conn: psycopg.Connection, run: RunRef, from_plan: str | None, max_age_hours: float) -> str:
    """Fix the plan `run` executes (its first task): its own (`from_plan` None), or a checked dry run's.

    Raises PlanRefused, naming the plan and what is wrong with it. A retry gives the same answer.
    """
    if from_plan:
        if run.dry_run:
            raise PlanRefused(f"Param from_plan ({from_plan!r}) executes a plan: it cannot be combined with dry_run")
        check_plan(conn, run, from_plan, max_age_hours)
    wanted = from_plan or run.run_id
    with conn.transaction():
        row = conn.execute(
            queries.load("plans/set_run_plan"), {"dag_id": run.dag_id, "run_id": run.run_id, "plan_run_id": wanted}
        ).fetchone()
    if row is None:
        raise LookupError(f"no blobgc.run row for {run.dag_id}/{run.run_id}")
    if row[0] != wanted:
        raise PlanRefused(
            f"run {run.run_id} of {run.dag_id} already executes the plan of {row[0]!r}; it cannot "
            f"switch to {wanted!r}: trigger a new run"
        )
    return wanted


def check_plan(conn: psycopg.Connection, run: RunRef, plan_run_id: str, max_age_hours: float) -> None:
    """Refuse a plan that is not a finished dry run of this DAG, is older than `max_age_hours`, or that another
    run has executed (or is executing)."""
    row = conn.execute(queries.load("plans/select_plan_run"), {"dag_id": run.dag_id, "run_id": plan_run_id}).fetchone()
    if row is None:
        raise PlanRefused(
            f"from_plan: no run {plan_run_id!r} of {run.dag_id} (the plan must be a dry run of the same DAG)"
        )
    dry_run, finished_at, _plan, planned_at, has_items, now = row
    if not dry_run:
        raise PlanRefused(
            f"from_plan: run {plan_run_id!r} of {run.dag_id} was a real run, not a dry run: only a dry "
            "run's plan can be executed"
        )
    if finished_at is None:
        raise PlanRefused(
            f"from_plan: dry run {plan_run_id!r} of {run.dag_id} has not finished: its plan may be "
            "incomplete. Wait for it to end (its report task), then trigger again"
        )
    refuse_if_expired(plan_run_id, planned_at, now, max_age_hours)
    others = conn.execute(
        queries.load("plans/select_plan_executions"),
        {"dag_id": run.dag_id, "plan_run_id": plan_run_id, "run_id": run.run_id},
    ).fetchall()
    refused = [(r, d) for r, d in others if d in (REJECTED, TIMED_OUT)]
    if refused:
        raise PlanRefused(
            f"from_plan: the plan of {plan_run_id!r} was {refused[0][1].replace('_', ' ')} at the gate of "
            f"run {refused[0][0]!r} of {run.dag_id}; a refused plan is never executed. Make a new dry run"
        )
    if others:
        raise PlanRefused(
            f"from_plan: the plan of {plan_run_id!r} was already executed by run {others[0][0]!r} of "
            f"{run.dag_id}; a plan is executed once. Make a new dry run"
        )
    if not has_items:
        log.info("the plan of %s is empty: this run will delete nothing", plan_run_id)


def plan_of(conn: psycopg.Connection, run: RunRef) -> str:
    """The plan `run` executes (fixed by its first task)."""
    row = conn.execute(queries.load("plans/select_run_plan"), {"dag_id": run.dag_id, "run_id": run.run_id}).fetchone()
    if row is None or row[0] is None:
        raise PlanRefused(
            f"run {run.run_id} of {run.dag_id} has no plan: its first task fixes one (clear the "
            "whole run, not only this task)"
        )
    plan_run_id: str = row[0]
    return plan_run_id


def plans_itself(conn: psycopg.Connection, run: RunRef) -> bool:
    """Whether `run` makes its own plan (False: it executes a dry run's, Param from_plan)."""
    return plan_of(conn, run) == run.run_id


def plan_max_age(params: dict[str, Any]) -> float:
    """A run's Param plan_max_age_hours (its default when the run has none)."""
    return float(params.get("plan_max_age_hours", PLAN_MAX_AGE_HOURS))


def check_fresh(conn: psycopg.Connection, run: RunRef, plan_run_id: str, max_age_hours: float) -> None:
    """Refuse to execute a plan that expired meanwhile (a long wait at the gate, a late retry)."""
    row = conn.execute(queries.load("plans/select_plan_run"), {"dag_id": run.dag_id, "run_id": plan_run_id}).fetchone()
    if row is None:
        raise PlanRefused(f"the plan of {plan_run_id!r} is gone")
    refuse_if_expired(plan_run_id, row[3], row[5], max_age_hours)


def refuse_if_expired(plan_run_id: str, planned_at: datetime, now: datetime, max_age_hours: float) -> None:
    """The one expiry rule: a plan older than `max_age_hours` (from its oldest item) is never executed."""
    age = now - planned_at
    if age > timedelta(hours=max_age_hours):
        raise PlanRefused(
            f"the plan of {plan_run_id!r} was made at {planned_at.isoformat()}, "
            f"{age.total_seconds() / 3600:.1f} h ago: it expired (plans expire after "
            f"plan_max_age_hours = {max_age_hours:g} h) and nothing of it is deleted. Make a new plan "
            "(a dry run, or a new real run)"
        )


def restart_plan_part(conn: psycopg.Connection, run: RunRef, part: str) -> None:
    """Take back what an earlier attempt of this planning task planned in `part` (a retry plans its part once).

    Refused (PlanRefused) once the plan was judged by the gate, partly executed, or is executed by another run:
    planning again would change a plan someone approved, or one whose execution is on record."""
    blocker = conn.execute(
        queries.load("plans/select_replan_blockers"), {"dag_id": run.dag_id, "run_id": run.run_id}
    ).fetchone()
    if blocker is not None:
        raise PlanRefused(
            f"run {run.run_id} of {run.dag_id} may not plan again: {blocker[0]}. Planning again would "
            "change a plan that was judged or executed; trigger a new run instead"
        )
    with conn.transaction():
        conn.execute(queries.load("plans/delete_plan_part"), {"dag_id": run.dag_id, "run_id": run.run_id, "part": part})


def restart_planning(conn: psycopg.Connection, run: RunRef, part: str) -> None:
    """Take back what an earlier attempt of this planning task planned in `part` and, on a dry run, reported there,
    so that a retry plans and reports its part once.

    The plan is checked first (`restart_plan_part`): a retry refused because its plan was judged or is being
    executed leaves that plan and the dry run's report of it as they were."""
    restart_plan_part(conn, run, part)
    restart_dry_run_part(conn, run, part)


def item_cutoff(item: PlanItem, cutoff: datetime) -> datetime:
    """The cut-off to re-check a planned row against: the earlier of the executing run's and the one the row was
    planned by (`modified_before`). A row touched since its plan was made is then skipped, even by a run executing
    a dry run's plan with a shorter grace than the dry run had."""
    return min(cutoff, item.modified_before) if item.modified_before is not None else cutoff


def add_plan_item(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    part: str,
    collection: str | None,
    source: str,
    bucket: str,
    keys: Sequence[str],
    sizes: Sequence[int | None],
    row_ids: Sequence[str] | None = None,
    modified_before: datetime | None = None,
    rows: int | None = None,
    counts_part: str | None = None,
) -> None:
    """Add one item to `run`'s plan (call in the transaction that found it).

    On a dry run the plan is the report, recorded once: its keys are shown from the plan
    (`blobgc.deleted_object`, `dry_run = true`; the receipt's keys), never logged again, and, given `rows` (the
    rows the item deletes), the counters of `counts_part` (default `part`) grow by its rows, objects and bytes. A
    kind that counts a part once elsewhere (parallel planners would race on the same counters) passes no `rows`.
    """
    if not keys and not row_ids:
        return
    conn.execute(
        queries.load("plans/insert_plan_item"),
        {
            "dag_id": run.dag_id,
            "run_id": run.run_id,
            "part": part,
            "collection": collection,
            "source": source,
            "bucket": bucket,
            "row_ids": list(row_ids) if row_ids is not None else None,
            "keys": list(keys),
            "sizes": list(sizes),
            "bytes": sum(s or 0 for s in sizes),
            "modified_before": modified_before,
        },
    )
    if run.dry_run and rows is not None:
        add_counts(
            conn,
            run,
            rows=rows,
            objects=len(keys),
            bytes_=sum(s or 0 for s in sizes),
            part=counts_part or part,
            collection=collection,
        )


def plan_objects(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    part: str,
    source: str,
    bucket: str,
    keys: Sequence[str],
    sizes: Sequence[int],
    modified_before: datetime,
    batch_size: int,
    collection: str | None = None,
    counts_part: str | None = None,
    count: bool = False,
) -> None:
    """Plan objects no row accounts for (found by a listing or an inventory), an item per `batch_size` keys, each
    with the cut-off they were judged by; with `count`, a dry run counts them under `counts_part` as it goes."""
    for start in range(0, len(keys), batch_size):
        add_plan_item(
            conn,
            run,
            part=part,
            collection=collection,
            source=source,
            bucket=bucket,
            keys=keys[start : start + batch_size],
            sizes=sizes[start : start + batch_size],
            modified_before=modified_before,
            rows=0 if count else None,
            counts_part=counts_part,
        )


def plan_listed_objects(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    part: str,
    source: str,
    bucket: str,
    keys: Sequence[str],
    sizes: Sequence[int],
    modified_before: datetime,
    batch_size: int,
) -> None:
    """Plan the objects a listing task found in `part` (a shard), an item per `batch_size` keys, replacing what an
    earlier attempt of the task planned there (a retry lists again and plans each key once).

    Each item keeps the cut-off the objects were judged by (`modified_before`): when the plan is executed
    (`owe_planned_objects`), the drain keeps an object written again since. On a dry run the items are the
    report and the part's counters are set.
    """
    restart_planning(conn, run, part)
    with conn.transaction():
        plan_objects(
            conn,
            run,
            part=part,
            source=source,
            bucket=bucket,
            keys=keys,
            sizes=sizes,
            modified_before=modified_before,
            batch_size=batch_size,
        )
        if run.dry_run:  # the items are the report; the part's counters are set once
            set_counts(conn, run, rows=0, objects=len(keys), bytes_=sum(sizes), part=part)


@dataclass(frozen=True)
class PlanItem:
    id: int
    collection: str | None
    source: str
    bucket: str
    row_ids: list[str] | None
    keys: list[str]
    sizes: list[int | None]
    modified_before: datetime | None


def plan_parts(conn: psycopg.Connection, run: RunRef) -> list[dict[str, Any]]:
    """The parts of the plan `run` executes, `{"collection", "part", "items"}` each: one execution task each."""
    plan_run_id = plan_of(conn, run)
    return [
        {"collection": c, "part": p, "items": n}
        for c, p, n in conn.execute(
            queries.load("plans/select_plan_parts"), {"dag_id": run.dag_id, "plan_run_id": plan_run_id}
        ).fetchall()
    ]


def check_may_execute(conn: psycopg.Connection, run: RunRef) -> str:
    """The one check before anything of a plan is executed; returns the plan's run id.

    A real run's plan is executed only once its gate let it through (`passed`, or `approved` by a person), and
    only while it is younger than the run's `plan_max_age_hours` (recorded with the gate's judgement). Otherwise
    GateClosed or PlanRefused, and nothing is deleted: so for a task retried or cleared by hand hours later, a
    DAG wired wrongly, a test or a bench alike. Every execution reads its items through `pending_items`, which
    calls this first."""
    plan_run_id = plan_of(conn, run)
    decision = require_go(conn, run)
    if decision is not None:
        max_age = (decision.get("judgement") or {}).get("plan_max_age_hours", PLAN_MAX_AGE_HOURS)
        check_fresh(conn, run, plan_run_id, float(max_age))
    return plan_run_id


def executable_parts(conn: psycopg.Connection, run: RunRef) -> list[dict[str, Any]]:
    """`plan_parts` of a run whose plan may be executed now (`check_may_execute`), one execution task each."""
    check_may_execute(conn, run)
    return plan_parts(conn, run)


def pending_items(conn: psycopg.Connection, run: RunRef, *, part: str, collection: str | None) -> Iterator[PlanItem]:
    """The items of one part of `run`'s plan that it has not dealt with yet, in order, once `check_may_execute`
    let the plan through (checked here, before the first item: the executors of every kind read their items
    through this function, so none of them can execute a plan the gate did not let through).

    Read a page at a time outside any transaction the caller holds open long; each item is then dealt with in
    its own transaction (`record_outcome`)."""
    plan_run_id = check_may_execute(conn, run)
    return _items(conn, run, plan_run_id, part=part, collection=collection)


def _items(
    conn: psycopg.Connection, run: RunRef, plan_run_id: str, *, part: str, collection: str | None
) -> Iterator[PlanItem]:
    after = 0
    while True:
        rows = conn.execute(
            queries.load("plans/select_pending_items"),
            {
                "dag_id": run.dag_id,
                "run_id": run.run_id,
                "plan_run_id": plan_run_id,
                "part": part,
                "collection": collection,
                "after": after,
                "limit": PAGE,
            },
        ).fetchall()
        if not rows:
            return
        for row in rows:
            yield PlanItem(*row)
        after = rows[-1][0]


def record_outcome(
    conn: psycopg.Connection,
    run: RunRef,
    item: PlanItem,
    *,
    rows_deleted: int = 0,
    objects_owed: int = 0,
    skipped_ids: Sequence[str] = (),
    skipped_keys: Sequence[str] = (),
) -> None:
    """What `run` did with `item`; call in the transaction that did it."""
    conn.execute(
        queries.load("plans/insert_plan_outcome"),
        {
            "dag_id": run.dag_id,
            "run_id": run.run_id,
            "item_id": item.id,
            "rows_deleted": rows_deleted,
            "objects_owed": objects_owed,
            "skipped_ids": list(skipped_ids),
            "skipped_keys": list(skipped_keys),
        },
    )


@dataclass(frozen=True)
class PlanSize:
    rows: int = 0
    objects: int = 0
    bytes: int = 0


def plan_size(conn: psycopg.Connection, dag_id: str, plan_run_id: str) -> tuple[PlanSize, dict[str, PlanSize]]:
    """A plan's size, whole and per collection."""
    whole, per = PlanSize(), {}
    for is_whole, collection, rows, objects, bytes_ in conn.execute(
        queries.load("plans/summarize_plan"), {"dag_id": dag_id, "plan_run_id": plan_run_id}
    ).fetchall():
        size = PlanSize(int(rows or 0), int(objects or 0), int(bytes_ or 0))
        if is_whole:
            whole = size
        elif collection is not None:
            per[collection] = size
    return whole, per


def execution_report(conn: psycopg.Connection, run: RunRef) -> dict[str, Any]:
    """Planned, deleted, skipped as referenced again, and failed: the report of a run that executed a plan, with
    `figures` (`PlanFigures.to_json`): planned = deleted + absent + kept + failed, in keys and in the plan's bytes."""
    try:
        plan_run_id = plan_of(conn, run)
    except PlanRefused:
        return {}
    planned, _ = plan_size(conn, run.dag_id, plan_run_id)
    report: dict[str, Any] = {
        "plan": plan_run_id,
        "planned_rows": planned.rows,
        "planned_objects": planned.objects,
        "planned_bytes": planned.bytes,
    }
    decision = gate_decision(conn, run)
    if decision is not None:
        report["gate"] = {k: v for k, v in decision.items() if k != "judgement"}
    figures = plan_figures(conn, run.dag_id, run.run_id)
    if figures is not None:  # planned = deleted + absent + kept + failed, each figure with its source
        report["figures"] = figures.to_json()
        for line in figures.lines():
            log.info("%s", line)
    if run.dry_run:
        return report
    done = execution_figures(conn, run.dag_id, run.run_id)
    report.update(
        {
            "items_done": done.items_done,
            "skipped_rereferenced_rows": done.rows_skipped,
            "skipped_rereferenced_objects": done.objects_skipped,
            "failed_objects": done.objects_failed,
        }
    )
    return report


@dataclass(frozen=True)
class ExecutionFigures:
    """What a run did with its plan: items dealt with; rows and objects skipped as referenced again (those it
    passed over, and keys the drain's guard kept); objects still owed."""

    items_done: int = 0
    rows_skipped: int = 0
    objects_skipped: int = 0
    objects_failed: int = 0


def execution_figures(conn: psycopg.Connection, dag_id: str, run_id: str) -> ExecutionFigures:
    items_done, rows_skipped, objects_skipped, objects_kept, objects_failed = queries.one_row(
        conn.execute(queries.load("plans/summarize_execution"), {"dag_id": dag_id, "run_id": run_id})
    )
    return ExecutionFigures(
        int(items_done), int(rows_skipped), int(objects_skipped) + int(objects_kept), int(objects_failed)
    )


# Where each DAG's plan takes the sizes of its keys from (blobgc.plan_item.sizes): the one source of the bytes shown
# for a plan and for what became of it. A key the plan has no size for counts 0 bytes, and the figures say how many.
PLAN_SIZE_SOURCES: dict[str, str] = {
    "blobgc_sweep": "the table's size column, on each row's first key only",
    "blobgc_reconcile": "the store's listing (or inventory report) when the plan was made",
}  # and a kind's DAG: what its kind declares (blobgc.core.registry.DagNeeds.plan_sizes)
PLAN_SIZE_SOURCE = "what the plan recorded when it was made (blobgc.plan_item.sizes)"
COUNTED_SIZE_SOURCE = (
    "each deleted object's size as the drain counted it: the size logged for its key where there is "
    "one, else the store's at delete time"
)


def plan_size_source(dag_id: str) -> str:
    """Where `dag_id`'s plan takes its sizes from, in words."""
    needs = registry.dag_needs(dag_id)
    if needs is not None and needs.plan_sizes:
        return needs.plan_sizes
    return PLAN_SIZE_SOURCES.get(dag_id, PLAN_SIZE_SOURCE)


@dataclass(frozen=True)
class PlanFigures:
    """Every figure shown for a plan and its execution, reconciled: the plan's keys are each deleted, absent, kept or
    failed (or not reached yet), in keys and in bytes from one source, the plan's own sizes (`size_source`).

    The bytes the run deleted (`deleted_counted_bytes`, and `drained_bytes`, what `blobgc.run` and
    `blobgc.reclaim_daily` count as `bytes_deleted`) are another figure: the drain's sizes (`COUNTED_SIZE_SOURCE`),
    which include the keys whose size the plan did not know, and, in `drained_*`, keys earlier runs owed that this
    run's drain deleted.
    """

    plan_run_id: str
    dry_run: bool
    size_source: str
    planned_keys: int = 0
    planned_bytes: int = 0
    unknown_size_keys: int = 0
    deleted_keys: int = 0
    deleted_bytes: int = 0
    absent_keys: int = 0
    absent_bytes: int = 0
    kept_keys: int = 0
    kept_bytes: int = 0
    skipped_keys: int = 0  # of kept: never owed, its row referenced or changed again (the rest the drain's guard kept)
    failed_keys: int = 0
    failed_bytes: int = 0
    not_reached_keys: int = 0
    not_reached_bytes: int = 0
    deleted_counted_bytes: int = 0
    deleted_here_keys: int = 0
    deleted_here_bytes: int = 0
    outside_keys: int = 0
    planned_rows: int = 0
    deleted_rows: int = 0
    skipped_rows: int = 0
    not_reached_rows: int = 0
    drained_keys: int = 0
    drained_bytes: int = 0

    OUTCOMES: ClassVar[tuple[str, ...]] = ("deleted", "absent", "kept", "failed", "not_reached")

    def parts(self, unit: str) -> dict[str, int]:
        """Outcome -> keys (`unit` "keys") or bytes (`unit` "bytes") of the planned keys."""
        return {o: getattr(self, f"{o}_{unit}") for o in self.OUTCOMES}

    @property
    def balanced(self) -> bool:
        """planned = deleted + absent + kept + failed (+ not reached), in keys and in bytes."""
        return self.planned_keys == sum(self.parts("keys").values()) and self.planned_bytes == sum(
            self.parts("bytes").values()
        )

    def planned_label(self) -> str:
        unknown = (
            f"{self.unknown_size_keys:,} keys of unknown size not counted"
            if self.unknown_size_keys
            else "every key's size known"
        )
        return (
            f"planned: {self.planned_keys:,} keys, {human_bytes(self.planned_bytes)} (sizes from "
            f"{self.size_source}; {unknown})"
        )

    def equation(self, unit: str) -> str:
        """`planned N = deleted D + absent A + kept K + failed F` in keys or (human) bytes."""

        def shown(n: int) -> str:
            return human_bytes(n) if unit == "bytes" else f"{n:,}"

        terms = [f"{o.replace('_', ' ')} {shown(n)}" for o, n in self.parts(unit).items() if o != "not_reached" or n]
        total = self.planned_bytes if unit == "bytes" else self.planned_keys
        return f"planned {shown(total)} = " + " + ".join(terms) + (" keys" if unit == "keys" else "")

    def lines(self) -> list[str]:
        """The figures in words, each with its source: a dry run's plan, or a plan and what became of each key."""
        if self.dry_run:
            return [self.planned_label()]
        out = [
            self.equation("keys"),
            f"{self.equation('bytes')} (bytes as planned: sizes from {self.size_source}; "
            f"{self.unknown_size_keys:,} keys of unknown size count 0)",
            f"kept {self.kept_keys:,}: {self.skipped_keys:,} skipped at delete time (referenced or changed again "
            f"since the plan), {self.kept_keys - self.skipped_keys:,} kept by the drain's check",
            f"bytes deleted: {human_bytes(self.deleted_counted_bytes)} for the {self.deleted_keys:,} deleted keys "
            f"(sizes: {COUNTED_SIZE_SOURCE}; reclaimed only once gone from storage: see the receipt)",
        ]
        if self.planned_rows:
            terms = [f"deleted {self.deleted_rows:,}", f"skipped {self.skipped_rows:,}"] + (
                [f"not reached {self.not_reached_rows:,}"] if self.not_reached_rows else []
            )
            balanced = self.planned_rows == self.deleted_rows + self.skipped_rows + self.not_reached_rows
            out.append(
                f"rows: planned {self.planned_rows:,}"
                + (" = " + " + ".join(terms) if balanced else "; " + ", ".join(terms))
                + " (skipped: referenced or changed again since the plan)"
            )
        if self.drained_keys != self.deleted_here_keys or self.drained_bytes != self.deleted_here_bytes:
            out.append(
                f"this run's drain deleted {self.drained_keys:,} objects, {human_bytes(self.drained_bytes)} "
                f"(its blobgc.run counts): {self.deleted_here_keys:,} of this plan "
                f"({human_bytes(self.deleted_here_bytes)}) and {self.drained_keys - self.deleted_here_keys:,} "
                f"other runs owed ({human_bytes(self.drained_bytes - self.deleted_here_bytes)})"
            )
        if self.deleted_keys != self.deleted_here_keys:
            out.append(
                f"{self.deleted_keys - self.deleted_here_keys:,} of the deleted keys were deleted by a later "
                "run's drain (it retried them)"
            )
        if self.not_reached_keys:
            out.append(
                f"not reached {self.not_reached_keys:,}: keys of plan items this run has not dealt with (the "
                "gate refused the plan, or the run has not got to them)"
            )
        if self.outside_keys:
            out.append(f"{self.outside_keys:,} keys this run owed are not in its plan")
        return out

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = asdict(self)
        data["counted_size_source"] = COUNTED_SIZE_SOURCE
        data["balanced"] = self.balanced
        data["lines"] = self.lines()
        return data


def plan_figures(conn: psycopg.Connection, dag_id: str, run_id: str) -> PlanFigures | None:
    """A run's plan and what became of each of its keys (`PlanFigures`); None for a run without a plan."""
    row = conn.execute(queries.load("plans/select_plan_run"), {"dag_id": dag_id, "run_id": run_id}).fetchone()
    if row is None:
        return None
    dry_run, _finished_at, plan_run_id, _planned_at, _has_items, _now = row
    if plan_run_id is None:  # a run of a DAG without plans, or from before them
        return None
    with conn.cursor(row_factory=dict_row) as cur:
        values = (
            cur.execute(
                queries.load("plans/summarize_plan_outcomes"),
                {"dag_id": dag_id, "run_id": run_id, "plan_run_id": plan_run_id},
            ).fetchone()
            or {}
        )
    return PlanFigures(
        plan_run_id,
        bool(dry_run),
        plan_size_source(dag_id),
        **{name: int(value or 0) for name, value in values.items()},
    )


@dataclass
class OwedFromPlan(TaskResult):
    """What owing a plan's objects did: items dealt with and objects handed to the drain."""

    items: int = 0
    objects_owed: int = 0


def owe_planned_objects(conn: psycopg.Connection, run: RunRef) -> OwedFromPlan:
    """Owe the objects of `run`'s plan to the outbox, an item per transaction (a retry skips what is done): the
    execution of a plan of objects alone (reconcile's orphans).

    Each key is logged with the cut-off it was judged by (`modified_before`), so the drain checks it again just
    before deleting: a row that accounts for it now keeps it (the layout's guard), and so does an object written
    again since the plan (its LastModified is then past the cut-off). Keys outside the plan are never owed.
    """
    result = OwedFromPlan()
    if run.dry_run:
        return result
    for part in executable_parts(conn, run):
        for item in pending_items(conn, run, part=part["part"], collection=part["collection"]):
            with conn.transaction():
                record_deletions(
                    conn,
                    run,
                    source=item.source,
                    bucket=item.bucket,
                    keys=item.keys,
                    sizes=item.sizes,
                    part=part["part"],
                    modified_before=item.modified_before,
                )
                record_outcome(conn, run, item, objects_owed=len(item.keys))
            result.items += 1
            result.objects_owed += len(item.keys)
    log.info(
        "owed %d planned objects (%d plan items) to the drain, which checks each again",
        result.objects_owed,
        result.items,
    )
    return result


# --------------------------------------------------------------------------------------------- decisions
def record_decision(conn: psycopg.Connection, run: RunRef, decision: str, decided_by: str | None) -> None:
    """A person's answer to a waiting gate (or the timeout's: `decided_by` None)."""
    with conn.transaction():
        row = conn.execute(
            queries.load("plans/update_gate_decision"),
            {"dag_id": run.dag_id, "run_id": run.run_id, "decision": decision, "decided_by": decided_by},
        ).fetchone()
    if row is None:
        raise LookupError(f"run {run.run_id} of {run.dag_id} has no gate judgement to decide")
    log.info("the gate of %s/%s: %s%s", run.dag_id, run.run_id, decision, f" by {decided_by}" if decided_by else "")


def gate_decision(conn: psycopg.Connection, run: RunRef) -> dict[str, Any] | None:
    row = conn.execute(
        queries.load("plans/select_gate_decision"), {"dag_id": run.dag_id, "run_id": run.run_id}
    ).fetchone()
    if row is None:
        return None
    names = ("decision", "decided_by", "decided_at", "judgement", "planned_rows", "planned_objects", "planned_bytes")
    return dict(zip(names, row, strict=True))


def require_go(conn: psycopg.Connection, run: RunRef) -> dict[str, Any] | None:
    """Refuse a real run's plan unless its gate passed it or a person approved it; the decision (None: a dry run,
    which executes nothing and needs none). Called by `check_may_execute`, before any item is executed."""
    if run.dry_run:
        return None
    decision = gate_decision(conn, run)
    if decision is None or decision["decision"] not in GOES_ON:
        state = decision["decision"] if decision else "not judged yet"
        who = f" by {decision['decided_by']}" if decision and decision["decided_by"] else ""
        raise GateClosed(
            f"the gate has not let run {run.run_id} of {run.dag_id} through ({state}{who}): nothing is "
            "deleted. Its gate task decides; a rejected or timed-out plan is never executed"
        )
    return decision
