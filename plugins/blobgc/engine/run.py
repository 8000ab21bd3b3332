"""The engine's steps: what every planned deletion does the same way, whoever runs it.

    start        the kind's first step fixes the run's plan (`fix_run_plan`: its own, or with Param `from_plan` a
                 dry run's, checked) before it prepares, shards or plans
    prepare      the kind's work before planning (`Deletion.prepare`)
    shards       the plan's shards, for a run that plans itself (none for one executing a dry run's plan)
    plan         one shard planned into the plan store; nothing is deleted
    -- the gate: `blobgc.core.gate` judges the plan; a DAG asks a person (`blobgc.dag_kit.gate`), a caller
       outside Airflow names who lets it through (`run_through`'s `approved_by`)
    parts        the plan's parts, once the gate let it through
    execute      one part executed by the kind, refused first unless the gate let the plan through
                 (`blobgc.core.plans.check_may_execute`)
    owe          for a plan of objects alone: its objects owed to the outbox (refused the same way)
    drain        `blobgc.core.outbox.delete_owed_objects` and `blobgc.core.cache_purge` (in the DAG's own tasks)

A DAG runs each step as a task (`blobgc.dag_kit.builder`); `run_through` runs them in order in one process, for
tests and benches. Neither can execute a plan the gate did not let through: the refusal is here and in the plan
store's reader (`blobgc.core.plans.pending_items`), not in how the steps are wired.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from blobgc.core.gate import let_through
from blobgc.core.plans import (
    OwedFromPlan,
    check_may_execute,
    executable_parts,
    fix_plan,
    owe_planned_objects,
    plan_max_age,
    plans_itself,
)
from blobgc.core.results import TaskResult
from blobgc.engine.deletion import PLAN, PREPARE, SHARDS, Deletion, Work

log = logging.getLogger(__name__)


def fix_run_plan(work: Work) -> bool:
    """Fix the plan the run executes; True when the run makes its own plan. With Param `from_plan`, the named dry
    run's plan is checked (same DAG, finished, younger than `plan_max_age_hours`, executed by no other run) and
    nothing is planned anew. Called by the kind's first step, whichever it is; a retry finds the plan fixed."""
    plan = fix_plan(work.conn, work.run, work.params.get("from_plan"), plan_max_age(work.params))
    if plan != work.run.run_id:
        log.info("this run executes the plan of dry run %s: it plans nothing itself", plan)
    return plan == work.run.run_id


def start(work: Work, deletion: Deletion, step: str) -> bool:
    """Run by every step before planning: the first (`deletion.first`) checks the settings and fixes the plan; the
    others read it. True when the run plans itself."""
    if deletion.first != step:
        return plans_itself(work.conn, work.run)
    deletion.check(work)
    return fix_run_plan(work)


def prepare(work: Work, deletion: Deletion) -> TaskResult:
    return deletion.prepare(work, plans=start(work, deletion, PREPARE))


def shards(work: Work, deletion: Deletion, prepared: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    if not start(work, deletion, SHARDS):
        return []
    return deletion.shards(work, prepared)


def plan(
    work: Work, deletion: Deletion, shard: dict[str, Any] | None = None, prepared: dict[str, Any] | None = None
) -> TaskResult:
    if not start(work, deletion, PLAN):
        return deletion.nothing_planned()
    return deletion.plan(work, shard or {}, prepared)


def parts(work: Work) -> list[dict[str, Any]]:
    """The parts of the run's plan (`{"collection", "part"}`), refused unless the gate let the plan through."""
    return [{"collection": p["collection"], "part": p["part"]} for p in executable_parts(work.conn, work.run)]


def execute(work: Work, deletion: Deletion, part: dict[str, Any] | None = None) -> TaskResult:
    """One part of the plan executed by the kind (the whole plan, `part` None), once the gate let it through:
    refused (`GateClosed`, `PlanRefused`) before the kind is called otherwise, whoever calls."""
    check_may_execute(work.conn, work.run)
    return deletion.execute(work, part)


def owe(work: Work) -> OwedFromPlan:
    """A plan of objects alone: its objects owed to the drain (refused the same way)."""
    return owe_planned_objects(work.conn, work.run)


@dataclass
class Ran:
    """What `run_through` did, step by step (each result as its XCom would be)."""

    prepared: dict[str, Any] | None = None
    planned: list[dict[str, Any]] = field(default_factory=list)
    decision: str | None = None
    executed: list[dict[str, Any]] = field(default_factory=list)
    owed: dict[str, Any] | None = None


def run_through(work: Work, deletion: Deletion, *, approved_by: str) -> Ran:
    """A run of `deletion` in one process, step by step as its DAG runs them, with the gate between planning and
    execution as `blobgc.core.gate.let_through` (past the threshold, approved by `approved_by`, on record). A dry
    run plans (its report) and executes nothing. The objects and cache keys owed are left to the drain."""
    ran = Ran()
    for read in deletion.preflight():
        read()
    if deletion.tasks.prepare:
        ran.prepared = prepare(work, deletion).to_xcom()
    found = shards(work, deletion, ran.prepared) if deletion.tasks.shards else [{}]
    ran.planned = [plan(work, deletion, shard, ran.prepared).to_xcom() for shard in found]
    ran.decision = let_through(work.conn, work.run, approved_by=approved_by)
    if work.run.dry_run:
        return ran
    if deletion.tasks.execute is None:
        ran.owed = owe(work).to_xcom()
    elif deletion.mapped:
        ran.executed = [execute(work, deletion, part).to_xcom() for part in parts(work)]
    else:
        ran.executed = [execute(work, deletion).to_xcom()]
    return ran
