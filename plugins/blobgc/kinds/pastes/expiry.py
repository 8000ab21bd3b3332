"""Seed 002's batch expiry of deduplicated pastes with a reference count, planned first (`blobgc.core.plans`).

Identical content is stored once, as `pastes/{content_hash}`; `app.content.ref_count` counts the
pastes that point at it. A run **plans first, then executes exactly its plan**:

- `check_ref_counts` repairs ref_count drift (the count of pastes is the truth) and, when the run plans
  itself, plans the contents no paste points at (part `ORPHANS_PART`: row_ids the hashes, keys their objects).
- `plan_expiry` lists the pastes due before the cutoff in one range of `content_hash`
  (`split_expiry_contents`: all the pastes of a content in one part), a batch per plan item, without
  locking or deleting: row_ids the short codes, keys (with sizes) the objects of the contents the batch
  takes to ref_count 0 (every paste of theirs is due, and none comes after the batch). A dry run's plan
  is its report.
- `execute_expiry_part` executes one part of the plan, an item per transaction (`record_outcome`): claim
  again (FOR UPDATE SKIP LOCKED) only the item's pastes still NOT_EXPIRED and due before the plan's cutoff,
  delete them, decrement each content once by its claimed pastes, delete the contents that reach 0 *and
  whose key the item planned*, and owe their objects (outbox) and the pastes' cache keys
  (`blobgc.cache_purge`). A paste extended since the plan is skipped; so is a planned key whose content
  did not reach 0 (a new paste). A content that reaches 0 unplanned keeps its row (at ref_count 0) and
  object: a later run plans it as an orphan. Nothing outside the plan is ever deleted.

S3 and Redis are called afterwards by their own tasks, so a failure of either leaves owed work that
the next attempt completes.

**Why two runs never double-decrement:** a decrement is derived from the rows its own transaction
deleted. A paste deleted by one run is gone for every other, so no paste is counted twice.

**The re-upload race:** a paste created with the same content after its old content row was
deleted makes a new content row (and uploads the object again) under the same key. The owed
deletion must then keep the object: the layout's drain-time guard (`blobgc.kinds.pastes.layouts.PASTE_CONTENTS`)
inserts an uncommitted placeholder row per hash before deleting: a hash that exists again is kept,
and a writer of the same content waits on the placeholder until the deletion is done, then creates
its row as new and uploads the object again. The write path is the application's
(`demo_app.pastes.create_paste`).

The DAG runs planning and execution as tasks with the gate between them; tests and benches run both halves
at once through `tests.support.gated`, passing the gate as a named person.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import psycopg

from blobgc.core import queries
from blobgc.core.cache_purge import owe_cache_purge
from blobgc.core.objects import check_batch_size
from blobgc.core.outbox import record_deletions
from blobgc.core.plans import (
    PlanItem,
    add_plan_item,
    executable_parts,
    pending_items,
    plan_of,
    plan_parts,
    plans_itself,
    record_outcome,
    restart_planning,
)
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef, add_counts
from blobgc.core.sizes import human_bytes
from blobgc.kinds.pastes.layouts import PASTE_CONTENTS, content_key

log = logging.getLogger(__name__)

SOURCE = PASTE_CONTENTS.source
SAMPLE = 10
ORPHANS_PART = "orphan contents"  # the plan's part of contents no paste points at
CONTENTS_PART = "contents"  # the plan's parts of due pastes start so: `contents_part`
DEADLOCK_RETRIES = 5  # attempts of an item rolled back by a deadlock with another run


ContentRange = tuple[str | None, str | None]


def split_expiry_contents(conn: psycopg.Connection, expired_before: datetime, parts: int) -> list[ContentRange]:
    """Cut the due pastes into about `parts` disjoint [start, end) ranges of `content_hash` of similar size.

    Every paste of a content falls in one range, so one task plans and executes all of them, in order: the
    item that takes a content to 0 is executed after the items holding its other pastes. With nothing due,
    or `parts` 1, one open range.
    """
    if parts <= 1:
        return [(None, None)]
    fractions = [i / parts for i in range(1, parts)]
    bounds = [
        row[0]
        for row in conn.execute(
            queries.load("pastes/select_expiry_content_split", "blobgc.kinds.pastes"),
            {"fractions": fractions, "expired_before": expired_before},
        )
    ]
    edges: list[str | None] = [None, *bounds, None]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def contents_part(content_range: ContentRange) -> str:
    """The name of the plan's part (and dry-run report's) for one range of `content_hash`."""
    start, end = content_range
    return f"{CONTENTS_PART} {start or 'start'}..{end or 'end'}"


def settled_plan(conn: psycopg.Connection, run: RunRef) -> str | None:
    """Why `run`'s own plan may no longer change (its gate judged it, or its execution began), or None.

    A run cleared whole after its gate (a backfill that reprocesses a failed run) then keeps the plan that was
    judged and goes on executing what is left of it, instead of planning again (which is refused)."""
    row = conn.execute(
        queries.load("plans/select_replan_blockers"), {"dag_id": run.dag_id, "run_id": run.run_id}
    ).fetchone()
    if row is not None:
        log.info("run %s keeps its plan as it is (%s): it plans nothing again", run.run_id, row[0])
    return row[0] if row else None


def restart_expiry_plan(conn: psycopg.Connection, run: RunRef) -> bool:
    """Take back the expiry parts an earlier attempt planned (their ranges may be cut differently now).

    Returns False, taking back nothing, once the plan is settled (`settled_plan`): then nothing is planned again."""
    if settled_plan(conn, run):
        return False
    for part in plan_parts(conn, run):
        if part["part"].startswith(f"{CONTENTS_PART} "):
            restart_planning(conn, run, part["part"])
    return True


@dataclass
class PlannedExpiry(TaskResult):
    """What a plan of expiry holds: pastes, the contents they take to 0 and their objects (a dry run's report)."""

    pastes: int = 0
    contents: int = 0
    objects: int = 0
    bytes: int = 0
    batches: int = 0
    sample_keys: list[str] = local()


def plan_expiry(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    expired_before: datetime,
    bucket: str,
    batch_size: int = 1000,
    content_range: ContentRange = (None, None),
) -> PlannedExpiry:
    """Plan the expiry of the pastes due before `expired_before` in one range of `content_hash`, an item per batch.

    Nothing is locked or deleted. Each item holds a batch of short codes, in (content_hash, short_code)
    order, and the objects of the contents that batch takes to ref_count 0: every paste of the content
    is due, and none comes after the batch, so each such key is in exactly one item of the whole plan,
    the last of its pastes'. A retried task plans its range again from scratch (nothing, once the plan is
    settled). On a dry run the keys also go to the deletion log (`dry_run = true`) and the run's counters,
    as the run's report.
    """
    check_batch_size(batch_size)
    if settled_plan(conn, run):
        return PlannedExpiry()
    part = contents_part(content_range)
    restart_planning(conn, run, part)
    start, end = content_range
    params = {"expired_before": expired_before, "batch_size": batch_size, "range_start": start or "", "range_end": end}
    result = PlannedExpiry()
    after = (start or "", "")
    while True:
        with conn.transaction():
            batch = conn.execute(
                queries.load("pastes/select_expiry_plan_batch", "blobgc.kinds.pastes"),
                {**params, "after_hash": after[0], "after_short_code": after[1]},
            ).fetchall()
            if not batch:
                break
            code, last_hash = batch[-1]
            after = (last_hash, code)
            going = conn.execute(
                queries.load("pastes/select_contents_going_with_batch", "blobgc.kinds.pastes"),
                {
                    "hashes": sorted({digest for _, digest in batch}),
                    "expired_before": expired_before,
                    "last_hash": last_hash,
                    "last_short_code": code,
                },
            ).fetchall()
            keys, sizes = [content_key(d) for d, _ in going], [size for _, size in going]
            add_plan_item(
                conn,
                run,
                part=part,
                collection=None,
                source=SOURCE,
                bucket=bucket,
                keys=keys,
                sizes=sizes,
                row_ids=[c for c, _ in batch],
                rows=len(batch) + len(going),
            )
            batch_bytes = sum(size or 0 for size in sizes)
        result.batches += 1
        result.pastes += len(batch)
        result.contents += len(going)
        result.objects += len(keys)
        result.bytes += batch_bytes
        result.sample_keys += keys[: max(0, SAMPLE - len(result.sample_keys))]
        if len(batch) < batch_size:
            break
    log.info(
        "%s: the plan expires %d pastes in %d items and deletes %d contents, %d objects (%s); sample keys: %s",
        part,
        result.pastes,
        result.batches,
        result.contents,
        result.objects,
        human_bytes(result.bytes),
        result.sample_keys[:5],
    )
    return result


@dataclass
class ExpiryExecution(TaskResult):
    """What executing part of a plan did, and what it skipped as needed again since the plan."""

    items: int = 0
    pastes_deleted: int = 0
    contents_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    cache_keys_owed: int = 0
    skipped_pastes: int = 0
    skipped_objects: int = 0
    contents_left_at_zero: int = 0
    sample_keys: list[str] = local()


def plan_cutoff(conn: psycopg.Connection, run: RunRef) -> datetime:
    """The cutoff the plan `run` executes was made with (the planning run's reference time)."""
    row = conn.execute(
        queries.load("pastes/select_plan_cutoff", "blobgc.kinds.pastes"),
        {"dag_id": run.dag_id, "plan_run_id": plan_of(conn, run)},
    ).fetchone()
    if row is None or row[0] is None:
        raise LookupError(f"the plan of {run.run_id} has no reference time")
    return row[0]


def execute_expiry_part(conn: psycopg.Connection, run: RunRef, *, part: str, redis_prefix: str = "") -> ExpiryExecution:
    """Execute exactly one part of `run`'s plan, an item per transaction, re-checking each (see the module doc).

    Pastes no longer NOT_EXPIRED or due before the plan's cutoff (an extended `expires_at`), or held by
    another run, are skipped and recorded (`skipped_ids`); planned keys not owed (their content did not reach
    0, or another paste points at it) too (`skipped_keys`). A retry skips the items already dealt with. A dry
    run executes nothing.
    """
    result = ExpiryExecution()
    if run.dry_run:
        return result
    expired_before = plan_cutoff(conn, run)
    for item in pending_items(conn, run, part=part, collection=None):
        claimed: list[str]
        for attempt in range(DEADLOCK_RETRIES):
            try:
                if part == ORPHANS_PART:
                    deleted, claimed, left = execute_orphan_item(conn, run, item, part=part), [], 0
                else:
                    claimed, deleted, left = execute_expiry_item(
                        conn, run, item, part=part, expired_before=expired_before, redis_prefix=redis_prefix
                    )
                break
            except psycopg.errors.DeadlockDetected:
                # another run decremented the same contents in another order; this item rolled back whole
                if attempt == DEADLOCK_RETRIES - 1:
                    raise
                log.warning("plan item %d rolled back by a deadlock with another run; retrying it", item.id)
        keys = [content_key(d) for d, _ in deleted]
        result.items += 1
        result.pastes_deleted += len(claimed)
        result.cache_keys_owed += len(claimed)
        result.contents_deleted += len(deleted)
        result.objects_owed += len(keys)
        result.bytes_owed += sum(size or 0 for _, size in deleted)
        result.skipped_pastes += 0 if part == ORPHANS_PART else len(item.row_ids or []) - len(claimed)
        result.skipped_objects += len(item.keys) - len(keys)
        result.contents_left_at_zero += left
        result.sample_keys += keys[: max(0, SAMPLE - len(result.sample_keys))]
    log.info(
        "%s: %d plan items; expired %d pastes, deleted %d contents, %d objects (%s) owed; skipped %d pastes "
        "(extended, or gone since the plan) and %d objects (their content is needed again)%s",
        part,
        result.items,
        result.pastes_deleted,
        result.contents_deleted,
        result.objects_owed,
        human_bytes(result.bytes_owed),
        result.skipped_pastes,
        result.skipped_objects,
        f"; {result.contents_left_at_zero} contents reached 0 outside the plan and are kept for a later run's "
        "orphan planning"
        if result.contents_left_at_zero
        else "",
    )
    return result


def execute_expiry_item(
    conn: psycopg.Connection, run: RunRef, item: PlanItem, *, part: str, expired_before: datetime, redis_prefix: str
) -> tuple[list[str], list[tuple[str, int | None]], int]:
    """One plan item of pastes in one transaction; returns (pastes deleted, contents deleted, contents left at 0)."""
    planned_keys = set(item.keys)
    with conn.transaction():
        claimed = conn.execute(
            queries.load("pastes/delete_planned_pastes", "blobgc.kinds.pastes"),
            {"codes": item.row_ids or [], "expired_before": expired_before},
        ).fetchall()
        per_content = sorted(Counter(digest for _, digest in claimed).items())
        decremented = (
            conn.execute(
                queries.load("pastes/decrement_contents", "blobgc.kinds.pastes"),
                {
                    "hashes": [digest for digest, _ in per_content],
                    "counts": [n for _, n in per_content],
                },
            ).fetchall()
            if per_content
            else []
        )
        at_zero = [digest for digest, ref_count, _ in decremented if ref_count <= 0]
        planned = [digest for digest in at_zero if content_key(digest) in planned_keys]
        deleted = (
            conn.execute(
                queries.load("pastes/delete_unreferenced_contents", "blobgc.kinds.pastes"), {"hashes": planned}
            ).fetchall()
            if planned
            else []
        )
        owed = [content_key(d) for d, _ in deleted]
        record_deletions(
            conn, run, source=SOURCE, bucket=item.bucket, keys=owed, sizes=[s for _, s in deleted], part=part
        )
        codes = [code for code, _ in claimed]
        owe_cache_purge(conn, run, [f"{redis_prefix}{code}" for code in codes])
        add_counts(conn, run, rows=len(claimed) + len(deleted))
        gone = set(codes)
        record_outcome(
            conn,
            run,
            item,
            rows_deleted=len(claimed),
            objects_owed=len(owed),
            skipped_ids=[c for c in item.row_ids or [] if c not in gone],
            skipped_keys=[k for k in item.keys if k not in set(owed)],
        )
    return codes, deleted, len(at_zero) - len(planned)


def execute_orphan_item(
    conn: psycopg.Connection, run: RunRef, item: PlanItem, *, part: str
) -> list[tuple[str, int | None]]:
    """One plan item of orphan contents in one transaction: lock them, re-check that no paste points at them
    (repairing their count), delete those, and owe their objects. Returns the contents deleted."""
    hashes = sorted(item.row_ids or [])
    with conn.transaction():
        conn.execute(queries.load("pastes/lock_contents", "blobgc.kinds.pastes"), {"hashes": hashes})
        conn.execute(queries.load("pastes/repair_ref_counts", "blobgc.kinds.pastes"), {"hashes": hashes})
        deleted = conn.execute(
            queries.load("pastes/delete_unreferenced_contents", "blobgc.kinds.pastes"), {"hashes": hashes}
        ).fetchall()
        owed = [content_key(d) for d, _ in deleted]
        record_deletions(
            conn, run, source=SOURCE, bucket=item.bucket, keys=owed, sizes=[s for _, s in deleted], part=part
        )
        add_counts(conn, run, rows=len(deleted))
        gone = {d for d, _ in deleted}
        record_outcome(
            conn,
            run,
            item,
            rows_deleted=len(deleted),
            objects_owed=len(owed),
            skipped_ids=[h for h in item.row_ids or [] if h not in gone],
            skipped_keys=[k for k in item.keys if k not in set(owed)],
        )
    return deleted


@dataclass
class DriftReport(TaskResult):
    """Contents whose ref_count disagreed with their real count of pastes, what was repaired, and the contents
    no paste points at that the run planned to delete (orphans)."""

    drifted: int = 0
    total_drift: int = 0
    repaired: int = 0
    orphans_planned: int = 0
    orphan_bytes_planned: int = 0
    sample: list[dict] = field(default_factory=list)


def check_ref_counts(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    bucket: str,
    batch_size: int = 1000,
    plan_orphans: bool = False,
) -> DriftReport:
    """Compare every `ref_count` with the real count of pastes, report the drift, and repair it (unless a dry run).

    The count of pastes is the truth. A lock-free scan finds the drifted contents; each batch then
    locks them (waiting for writers that hold them), recounts, and sets `ref_count` to the count.
    Contents left with no paste are never deleted here: with `plan_orphans` (a run that makes its own
    plan) they become items of the plan's part `ORPHANS_PART` (row_ids their hashes, keys their objects),
    deleted only when the plan is executed; otherwise a later run plans them. A retry plans them once; a
    plan already judged or executed (`settled_plan`) is kept as it is.
    """
    check_batch_size(batch_size)
    report = DriftReport()
    if plan_orphans and settled_plan(conn, run):
        plan_orphans = False
    if plan_orphans:
        restart_planning(conn, run, ORPHANS_PART)
    candidates = conn.execute(queries.load("pastes/select_drifted_contents", "blobgc.kinds.pastes")).fetchall()
    drifted = [row for row in candidates if row[1] != row[2]]
    report.drifted = len(drifted)
    report.total_drift = sum(abs(ref_count - pastes) for _, ref_count, pastes, _ in drifted)
    report.sample = [{"content_hash": d, "ref_count": rc, "pastes": n} for d, rc, n, _ in drifted[:SAMPLE]]
    if drifted:
        log.warning(
            "%d contents have a ref_count that differs from their pastes (total drift %d); sample: %s",
            report.drifted,
            report.total_drift,
            report.sample,
        )
    for start in range(0, len(candidates), batch_size):
        part = candidates[start : start + batch_size]
        hashes = [row[0] for row in part]
        with conn.transaction():
            if run.dry_run:  # repairs nothing: the scan's orphans are the plan's
                orphans = [(d, size) for d, _, n, size in part if n == 0]
            else:
                conn.execute(queries.load("pastes/lock_contents", "blobgc.kinds.pastes"), {"hashes": hashes})
                report.repaired += len(
                    conn.execute(
                        queries.load("pastes/repair_ref_counts", "blobgc.kinds.pastes"), {"hashes": hashes}
                    ).fetchall()
                )
                orphans = (
                    conn.execute(
                        queries.load("pastes/select_pasteless_contents", "blobgc.kinds.pastes"), {"hashes": hashes}
                    ).fetchall()
                    if plan_orphans
                    else []
                )
            if plan_orphans and orphans:
                keys, sizes = [content_key(d) for d, _ in orphans], [s for _, s in orphans]
                add_plan_item(
                    conn,
                    run,
                    part=ORPHANS_PART,
                    collection=None,
                    source=SOURCE,
                    bucket=bucket,
                    keys=keys,
                    sizes=sizes,
                    row_ids=[d for d, _ in orphans],
                    rows=len(orphans),
                )
                report.orphans_planned += len(orphans)
                report.orphan_bytes_planned += sum(s or 0 for s in sizes)
    if candidates:
        log.info(
            "repaired %d ref_counts; planned %d contents with no paste left (%s)%s",
            report.repaired,
            report.orphans_planned,
            human_bytes(report.orphan_bytes_planned),
            "" if plan_orphans else " (this run plans nothing: a later run plans them)",
        )
    return report


# ------------------------------------------------------------------- outside Airflow: both halves at once
Connect = Callable[[], psycopg.Connection]
T = TypeVar("T")
W = TypeVar("W")


def side_by_side(
    conn: psycopg.Connection,
    work: Callable[[psycopg.Connection, W], T],
    items: Sequence[W],
    *,
    workers: int,
    connect: Connect | None,
) -> list[T]:
    """`work` on each of `items`: in turn on `conn`, or with `workers` > 1 and `connect`, side by side on
    connections of their own (as the DAG's mapped tasks run)."""
    if workers <= 1 or connect is None or len(items) <= 1:
        return [work(conn, item) for item in items]

    def on_own_connection(item: W) -> T:
        with connect() as own:
            return work(own, item)

    with ThreadPoolExecutor(min(workers, len(items))) as pool:
        return list(pool.map(on_own_connection, items))


def plan_due_pastes(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    bucket: str,
    batch_size: int = 1000,
    workers: int = 1,
    connect: Connect | None = None,
) -> PlannedExpiry:
    """The DAG's `expiry_ranges` and mapped `plan_expiry` tasks: plan the pastes due before the run's reference
    time in `workers` ranges of `content_hash`, side by side on connections from `connect` when given.

    Plans nothing when the run executes a dry run's plan, or once its own plan is settled (`settled_plan`)."""
    if not plans_itself(conn, run) or not restart_expiry_plan(conn, run):
        return PlannedExpiry()
    expired_before = plan_cutoff(conn, run)

    def plan_range(own: psycopg.Connection, content_range: ContentRange) -> PlannedExpiry:
        return plan_expiry(
            own, run, expired_before=expired_before, bucket=bucket, batch_size=batch_size, content_range=content_range
        )

    planned = side_by_side(
        conn, plan_range, split_expiry_contents(conn, expired_before, workers), workers=workers, connect=connect
    )
    total = PlannedExpiry(**PlannedExpiry.total([p.to_xcom() for p in planned]))
    total.sample_keys = [k for p in planned for k in p.sample_keys][:SAMPLE]
    return total


def execute_planned_pastes(
    conn: psycopg.Connection, run: RunRef, *, redis_prefix: str = "", workers: int = 1, connect: Connect | None = None
) -> ExpiryExecution:
    """The DAG's `plan_parts` and mapped `expire_pastes` tasks: execute every part of the run's plan
    (`execute_expiry_part`), side by side on connections from `connect` when given. Refused unless the gate let
    the plan through (`blobgc.core.plans.executable_parts` checks)."""

    def execute_part(own: psycopg.Connection, part: dict) -> ExpiryExecution:
        return execute_expiry_part(own, run, part=part["part"], redis_prefix=redis_prefix)

    done = side_by_side(conn, execute_part, executable_parts(conn, run), workers=workers, connect=connect)
    total = ExpiryExecution(**ExpiryExecution.total([d.to_xcom() for d in done]))
    total.sample_keys = [k for d in done for k in d.sample_keys][:SAMPLE]
    return total


@dataclass
class ExpiredPastes(TaskResult):
    """What a whole run of expiry (`tests.support.gated.expire_due_pastes`) deleted and owed, and what it skipped;
    on a dry run, what its plan of the due pastes would delete (orphans that `check_ref_counts` planned are in the
    run's counters, not here)."""

    pastes_deleted: int = 0
    contents_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    cache_keys_owed: int = 0
    batches: int = 0  # plan items executed, a transaction each (on a dry run: items of due pastes planned)
    skipped_pastes: int = 0
    skipped_objects: int = 0
    contents_left_at_zero: int = 0
    sample_keys: list[str] = local()
