"""A sweep run made the way blobgc_sweep's tasks make it, for the tests of its safety: plan_shards and plan_deletions
(`plan_sweep`), the gate and plan_parts' check (`pass_gate`), delete_unused_blobs (`execute_sweep`); the test drains.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import psycopg

from blobgc.collectors.sweep import PlanExecution, SweepResult, execute_plan_part, plan_collection, range_part
from blobgc.core.collections import BoundCollection
from blobgc.core.key_space import KeyRange
from blobgc.core.gate import GateSettings, judge, record_judgement
from blobgc.core.plans import APPROVED, PASSED, PLAN_MAX_AGE_HOURS, check_fresh, fix_plan, plan_of, require_go
from blobgc.core.references import ReferenceSet, discover_references
from blobgc.core.runs import RunRef

WHOLE: KeyRange = (None, None)


def references_of(conn: psycopg.Connection, bound: BoundCollection) -> ReferenceSet:
    """The collection's references, found afresh, as each of the DAG's tasks finds them at its start."""
    c = bound.collection
    return discover_references(conn, c.table, extra_sql=list(c.references), id_column=c.id)


def plan_sweep(conn: psycopg.Connection, run: RunRef, bound: BoundCollection, *, cutoff: datetime,
               refs: ReferenceSet | None = None, batch_size: int = 1000,
               key_ranges: tuple[KeyRange, ...] = (WHOLE,)) -> list[SweepResult]:
    """plan_shards (the run fixes its own plan) and one plan_deletions per id range."""
    fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
    return [plan_collection(conn, run, bound, refs if refs is not None else references_of(conn, bound),
                            cutoff=cutoff, batch_size=batch_size, key_range=key_range) for key_range in key_ranges]


def pass_gate(conn: psycopg.Connection, run: RunRef) -> str:
    """The gate lets the plan through (a person approves one past the threshold), then plan_parts' check."""
    judgement = judge(conn, run, GateSettings())
    decision = APPROVED if judgement.needs_approval and not run.dry_run else PASSED
    record_judgement(conn, run, judgement, decision, "tests" if decision == APPROVED else None)
    require_go(conn, run)
    check_fresh(conn, run, plan_of(conn, run), PLAN_MAX_AGE_HOURS)
    return decision


def execute_sweep(conn: psycopg.Connection, run: RunRef, bound: BoundCollection, *, cutoff: datetime,
                  refs: ReferenceSet | None = None, key_range: KeyRange = WHOLE) -> PlanExecution:
    """delete_unused_blobs for the part of one id range, with references found at its start unless `refs` (found
    earlier) are given."""
    return execute_plan_part(conn, run, bound, refs if refs is not None else references_of(conn, bound),
                             cutoff=cutoff, part=range_part(key_range, bound.name))


def sweep_run(conn: psycopg.Connection, run: RunRef, bound: BoundCollection, *, cutoff: datetime,
              refs: ReferenceSet | None = None, execute_refs: ReferenceSet | None = None, batch_size: int = 1000,
              key_range: KeyRange = WHOLE, between: Callable[[], object] | None = None
              ) -> tuple[SweepResult, PlanExecution]:
    """A whole run over one id range: plan, gate, then `between` (what happens after the gate let the plan through and
    before the delete task starts), then execute. Returns (the plan's figures, the execution's)."""
    (planned,) = plan_sweep(conn, run, bound, cutoff=cutoff, refs=refs, batch_size=batch_size, key_ranges=(key_range,))
    pass_gate(conn, run)
    if between is not None:
        between()
    return planned, execute_sweep(conn, run, bound, cutoff=cutoff, refs=execute_refs, key_range=key_range)
