"""Seed 002's batch expiry of deduplicated pastes with a reference count.

Identical content is stored once, as `pastes/{content_hash}`; `app.content.ref_count` counts the
pastes that point at it. The expiry deletes expired pastes in batches, one transaction each:
claim and delete the pastes (FOR UPDATE SKIP LOCKED), decrement each content once by its number of
claimed pastes, delete the contents that reach 0, and owe their objects (outbox) and the pastes'
cache keys (`blobgc.cache_purge`). S3 and Redis are called afterwards by their own tasks, so a
failure of either leaves owed work that the next attempt completes.

**Why two runs never double-decrement:** a decrement is derived from the rows its own transaction
deleted. A paste deleted by one run is gone for every other, so no paste is counted twice.

**The re-upload race:** a paste created with the same content after its old content row was
deleted makes a new content row (and uploads the object again) under the same key. The owed
deletion must then keep the object: the layout's drain-time guard (`blobgc.core.keys.PASTE_CONTENTS`)
inserts an uncommitted placeholder row per hash before deleting: a hash that exists again is kept,
and a writer of the same content waits on the placeholder until the deletion is done, then creates
its row as new and uploads the object again. The write path is the application's
(`demo_app.pastes.create_paste`).
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

import psycopg

from blobgc.core import queries
from blobgc.core.cache_purge import owe_cache_purge
from blobgc.core.keys import PASTE_CONTENTS, content_key
from blobgc.core.objects import check_batch_size
from blobgc.core.outbox import record_deletions, replace_run_log
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef, add_counts, set_counts
from blobgc.core.sizes import human_bytes

log = logging.getLogger(__name__)

SOURCE = PASTE_CONTENTS.source
SAMPLE = 10
# the keyset position before every paste
START = (datetime(1, 1, 1, tzinfo=timezone.utc), "")


@dataclass
class ExpiryResult(TaskResult):
    """Pastes and contents deleted, objects and cache keys owed; on a dry run, what would go."""

    pastes_deleted: int = 0
    contents_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    cache_keys_owed: int = 0
    contents_below_zero: int = 0
    batches: int = 0
    sample_keys: list[str] = local()


ExpiryRange = tuple[datetime | None, datetime | None]
DEADLOCK_RETRIES = 5


def split_expiry_window(conn: psycopg.Connection, expired_before: datetime, parts: int) -> list[ExpiryRange]:
    """Cut the due pastes into about `parts` disjoint [start, end) ranges of `expires_at` of similar size.

    Each range is expired by its own worker (a mapped task). With nothing due, one open range.
    """
    if parts <= 1:
        return [(None, None)]
    fractions = [i / parts for i in range(1, parts)]
    bounds = [row[0] for row in conn.execute(queries.load("pastes/select_expiry_split"),
                                             {"fractions": fractions, "expired_before": expired_before})]
    edges: list[datetime | None] = [None, *bounds, None]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def expire_pastes(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    expired_before: datetime,
    bucket: str,
    batch_size: int = 1000,
    redis_prefix: str = "",
    expires_range: ExpiryRange = (None, None),
) -> ExpiryResult:
    """Delete the pastes with `status = 'NOT_EXPIRED'` and `expires_at < expired_before`, a batch per transaction.

    Each batch claims up to `batch_size` pastes, decrements their contents once per hash by the
    number of claimed pastes sharing it, deletes the contents that reach 0 and no paste references,
    owes their objects and the pastes' cache keys, and deletes the pastes. `expires_range` [start,
    end) limits the work to part of the window (`split_expiry_window`), so several workers expire
    disjoint parts. A dry run changes nothing and reports the whole window.
    """
    check_batch_size(batch_size)
    if run.dry_run:
        return preview_expiry(conn, run, expired_before=expired_before, bucket=bucket, batch_size=batch_size,
                              redis_prefix=redis_prefix)
    start, end = expires_range
    params = {"expired_before": expired_before, "batch_size": batch_size,
              "range_start": start or "-infinity", "range_end": end or "infinity"}
    result = ExpiryResult()
    after = (start or START[0], "")
    while True:
        for attempt in range(DEADLOCK_RETRIES):
            try:
                batch = expire_batch(conn, run, params, after, bucket=bucket, redis_prefix=redis_prefix)
                break
            except psycopg.errors.DeadlockDetected:
                # another run decremented the same contents in another order; this batch rolled back whole
                if attempt == DEADLOCK_RETRIES - 1:
                    raise
                log.warning("batch %d rolled back by a deadlock with another run; retrying it", result.batches + 1)
        if batch is None:
            break
        claimed, deleted, below_zero, after = batch
        keys = [content_key(digest) for digest, _ in deleted]
        batch_bytes = sum(size or 0 for _, size in deleted)
        result.batches += 1
        result.pastes_deleted += claimed
        result.contents_deleted += len(deleted)
        result.objects_owed += len(keys)
        result.bytes_owed += batch_bytes
        result.cache_keys_owed += claimed
        result.contents_below_zero += below_zero
        result.sample_keys += keys[: max(0, SAMPLE - len(result.sample_keys))]
        log.info("batch %d: expired %d pastes, deleted %d contents (%s owed in S3)%s",
                 result.batches, claimed, len(deleted), human_bytes(batch_bytes),
                 f"; {below_zero} contents at ref_count <= 0 still have pastes (drift: check_ref_counts repairs it)"
                 if below_zero else "")
        if claimed < batch_size:
            break
    log.info("expired %d pastes in %d batches; deleted %d contents, %d objects (%s) owed; sample keys: %s",
             result.pastes_deleted, result.batches, result.contents_deleted, result.objects_owed,
             human_bytes(result.bytes_owed), result.sample_keys[:5])
    return result


def expire_batch(
    conn: psycopg.Connection, run: RunRef, params: dict, after: tuple[datetime, str], *, bucket: str, redis_prefix: str
) -> tuple[int, list[tuple[str, int | None]], int, tuple[datetime, str]] | None:
    """One batch in one transaction; returns (pastes, deleted contents, contents left at <= 0, keyset) or None."""
    with conn.transaction():
        claimed = conn.execute(queries.load("pastes/delete_expired_pastes"),
                               {**params, "after_expires_at": after[0], "after_short_code": after[1]}).fetchall()
        if not claimed:
            return None
        per_content = sorted(Counter(digest for _, digest, _ in claimed).items())
        decremented = conn.execute(queries.load("pastes/decrement_contents"), {
            "hashes": [digest for digest, _ in per_content], "counts": [n for _, n in per_content],
        }).fetchall()
        at_zero = [digest for digest, ref_count, _ in decremented if ref_count <= 0]
        deleted = (conn.execute(queries.load("pastes/delete_unreferenced_contents"), {"hashes": at_zero})
                   .fetchall() if at_zero else [])
        record_deletions(conn, run, source=SOURCE, bucket=bucket, keys=[content_key(d) for d, _ in deleted],
                         sizes=[size for _, size in deleted])
        owe_cache_purge(conn, run, [f"{redis_prefix}{code}" for code, _, _ in claimed])
        add_counts(conn, run, rows=len(claimed) + len(deleted))
    last = max((expires, code) for code, _, expires in claimed)
    return len(claimed), deleted, len(at_zero) - len(deleted), last


def preview_expiry(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    expired_before: datetime,
    bucket: str,
    batch_size: int = 1000,
    redis_prefix: str = "",
) -> ExpiryResult:
    """A dry run's report: the pastes, contents, objects and bytes an expiry would remove, changing nothing.

    The keys that would go are written to the deletion log with `dry_run = true`, in batches of
    `batch_size`, and the run's counters are set to the totals (a retry rewrites both).
    """
    result = ExpiryResult()
    with conn.transaction():
        rows = conn.execute(queries.load("pastes/select_expiry_preview"), {"expired_before": expired_before}).fetchall()
        doomed = sorted((digest, size) for digest, _, goes, size in rows if goes)
        result.pastes_deleted = sum(n for _, n, _, _ in rows)
        result.contents_deleted = result.objects_owed = len(doomed)
        result.bytes_owed = sum(size or 0 for _, size in doomed)
        result.cache_keys_owed = result.pastes_deleted
        result.batches = replace_run_log(conn, run, source=SOURCE, bucket=bucket,
                                         keys=[content_key(d) for d, _ in doomed], sizes=[s for _, s in doomed],
                                         batch_size=batch_size)
        set_counts(conn, run, rows=result.pastes_deleted + result.contents_deleted,
                   objects=result.objects_owed, bytes_=result.bytes_owed)
    result.sample_keys = [content_key(d) for d, _ in doomed[:SAMPLE]]
    log.info("dry run: would expire %d pastes, delete %d contents and %d objects (%s), and purge %d cache keys "
             "(prefix %r); sample keys: %s", result.pastes_deleted, result.contents_deleted, result.objects_owed,
             human_bytes(result.bytes_owed), result.cache_keys_owed, redis_prefix, result.sample_keys[:5])
    return result


@dataclass
class DriftReport(TaskResult):
    """Contents whose ref_count disagreed with their real count of pastes, and what was done about it."""

    drifted: int = 0
    total_drift: int = 0
    repaired: int = 0
    contents_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    sample: list[dict] = field(default_factory=list)


def check_ref_counts(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    bucket: str,
    batch_size: int = 1000,
) -> DriftReport:
    """Compare every `ref_count` with the real count of pastes, report the drift, and repair it (unless a dry run).

    The count of pastes is the truth. A lock-free scan finds the drifted contents; each batch then
    locks them (waiting for writers that hold them), recounts, and sets `ref_count` to the count.
    Contents left with no paste are deleted and their objects owed, as expiry does: drift upwards
    would otherwise leak them forever.
    """
    check_batch_size(batch_size)
    report = DriftReport()
    candidates = conn.execute(queries.load("pastes/select_drifted_contents")).fetchall()
    drifted = [row for row in candidates if row[1] != row[2]]
    unreferenced = [(d, size) for d, _, n, size in candidates if n == 0]
    report.drifted = len(drifted)
    report.total_drift = sum(abs(ref_count - pastes) for _, ref_count, pastes, _ in drifted)
    report.sample = [{"content_hash": d, "ref_count": rc, "pastes": n} for d, rc, n, _ in drifted[:SAMPLE]]
    if drifted:
        log.warning("%d contents have a ref_count that differs from their pastes (total drift %d); sample: %s",
                    report.drifted, report.total_drift, report.sample)
    if run.dry_run:
        report.contents_deleted = report.objects_owed = len(unreferenced)
        report.bytes_owed = sum(size or 0 for _, size in unreferenced)
        return report
    hashes = [row[0] for row in candidates]
    for start in range(0, len(hashes), batch_size):
        part = hashes[start:start + batch_size]
        with conn.transaction():
            conn.execute(queries.load("pastes/lock_contents"), {"hashes": part})
            repaired = conn.execute(queries.load("pastes/repair_ref_counts"), {"hashes": part}).fetchall()
            deleted = conn.execute(queries.load("pastes/delete_unreferenced_contents"), {"hashes": part}).fetchall()
            record_deletions(conn, run, source=SOURCE, bucket=bucket,
                             keys=[content_key(d) for d, _ in deleted], sizes=[s for _, s in deleted])
            add_counts(conn, run, rows=len(deleted))
        report.repaired += len(repaired)
        report.contents_deleted += len(deleted)
        report.objects_owed += len(deleted)
        report.bytes_owed += sum(size or 0 for _, size in deleted)
    if candidates:
        log.info("repaired %d ref_counts; deleted %d contents with no paste left (%s owed in S3)",
                 report.repaired, report.contents_deleted, human_bytes(report.bytes_owed))
    return report
