"""Plan, pass the gate as a named person, then execute: a DAG run's halves in one call, for tests and benches.

A DAG runs these halves as tasks with the gate between them (`blobgc.dag_kit.builder`), and the engine runs a
whole kind in one process the same way (`blobgc.engine.run.run_through`). These helpers call a kind's planner and
executor with finer control than a run has (explicit generations, ranges planned and parts executed side by side
on several connections, for the benches); the gate is `blobgc.core.gate.let_through`, which records who let the
plan through. Nothing here skips it: the executors refuse a plan with no go decision on record
(`blobgc.core.plans.check_may_execute`).
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from blobgc.core.gate import let_through
from blobgc.core.plans import PLAN_MAX_AGE_HOURS, PlanRefused, fix_plan, plan_of
from blobgc.core.runs import RunRef, ensure_run
from blobgc.kinds.generations.collector import CollectResult, execute_plan_part, plan_generation, plan_part
from blobgc.kinds.pastes.expiry import (
    Connect,
    ExpiredPastes,
    check_batch_size,
    execute_planned_pastes,
    plan_due_pastes,
)


def expire_due_pastes(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    expired_before: datetime | None = None,
    bucket: str,
    batch_size: int = 1000,
    redis_prefix: str = "",
    workers: int = 1,
    connect: Connect | None = None,
    approved_by: str,
) -> ExpiredPastes:
    """Plan the run's expiry, pass the gate (`blobgc.core.gate.let_through`: past the threshold, approved by
    `approved_by`, on record), then execute that plan: for callers outside Airflow (tests, the bench). The DAG runs
    the halves as tasks (`plan_expiry`, then `expire_pastes`) with `blobgc.dag_kit.gate` between them, and
    `check_ref_counts` before them (call it first to plan orphans too).

    The cutoff is the run's reference time (`ensure_run(conn, run, expired_before)`); a run registered earlier
    with a later one is refused (ValueError), since it would expire pastes not due by `expired_before`. Fixes
    the run's own plan unless its plan is fixed already (a run fixed to a dry run's plan plans nothing and
    executes that). `workers` > 1 with `connect`: ranges planned, and parts executed, side by side on
    connections of their own, as the DAG's mapped tasks. A dry run plans (its report) and executes nothing;
    the objects and cache keys owed are left to `delete_owed_objects` and `purge_owed_cache_keys`.
    """
    check_batch_size(batch_size)
    run = ensure_run(conn, run, expired_before)
    if expired_before is not None and run.reference_time > expired_before:
        raise ValueError(
            f"run {run.run_id} expires pastes due before its reference time {run.reference_time}, "
            f"later than expired_before {expired_before}: register it with that time (ensure_run)"
        )
    try:
        plan_of(conn, run)
    except PlanRefused:  # no plan fixed yet: the run's own
        fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
    planned = plan_due_pastes(conn, run, bucket=bucket, batch_size=batch_size, workers=workers, connect=connect)
    if run.dry_run:
        return ExpiredPastes(
            pastes_deleted=planned.pastes,
            contents_deleted=planned.contents,
            objects_owed=planned.objects,
            bytes_owed=planned.bytes,
            cache_keys_owed=planned.pastes,
            batches=planned.batches,
            sample_keys=planned.sample_keys,
        )
    let_through(conn, run, approved_by=approved_by)
    done = execute_planned_pastes(conn, run, redis_prefix=redis_prefix, workers=workers, connect=connect)
    return ExpiredPastes(
        pastes_deleted=done.pastes_deleted,
        contents_deleted=done.contents_deleted,
        objects_owed=done.objects_owed,
        bytes_owed=done.bytes_owed,
        cache_keys_owed=done.cache_keys_owed,
        batches=done.items,
        skipped_pastes=done.skipped_pastes,
        skipped_objects=done.skipped_objects,
        contents_left_at_zero=done.contents_left_at_zero,
        sample_keys=done.sample_keys,
    )


def collect_generations(
    conn: psycopg.Connection, run: RunRef, generations: list[int], *, approved_by: str, **planning
) -> dict[int, CollectResult]:
    """Plan `generations`, pass the gate (`blobgc.core.gate.let_through`: past the threshold, approved by
    `approved_by`, on record), then execute that plan, as a run of the DAG does: for callers outside Airflow (the
    bench, tests). The DAG runs the halves as tasks with `blobgc.dag_kit.gate` between them.

    `planning` is `plan_generation`'s keywords. Fixes the run's plan as its own first (a run that executes a dry
    run's plan calls `execute_plan_part` alone). A run plans all its generations before executing any: once it
    has executed part of its plan, it may not plan again.
    """
    fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
    plans = {g: plan_generation(conn, run, generation=g, **planning) for g in generations}
    let_through(conn, run, approved_by=approved_by)
    collected = {}
    for g, plan in plans.items():
        done = execute_plan_part(conn, run, part=plan_part(g))
        if run.dry_run:
            deleted, n_bytes, cleared, skipped = plan.blobs_planned, plan.bytes_planned, plan.deletions_planned, 0
        else:
            deleted, n_bytes, cleared, skipped = (
                done.blobs_deleted,
                done.bytes_deleted,
                done.deletions_cleared,
                done.skipped_rereferenced,
            )
        collected[g] = CollectResult(
            g,
            plan.references_scanned,
            plan.filter_bytes,
            plan.candidates,
            deleted,
            n_bytes,
            cleared,
            plan.blobs_kept + skipped,
            skipped,
        )
    return collected


def collect_generation(
    conn: psycopg.Connection, run: RunRef, *, generation: int, approved_by: str, **planning
) -> CollectResult:
    """`collect_generations` of one generation."""
    return collect_generations(conn, run, [generation], approved_by=approved_by, **planning)[generation]
