"""The durable outbox of object deletions: owed in the row-deleting transaction, settled after S3 confirms.

A crash between the database commit and the S3 call leaves the keys owed, and the next drain
deletes them. Keys S3 refuses stay owed with their error. Nothing is forgotten.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from blobgc import queries
from blobgc.objects import MAX_KEYS_PER_CALL, delete_objects_in_batches
from blobgc.runs import RunRef, add_counts
from blobgc.sizes import human_bytes

log = logging.getLogger(__name__)


@dataclass
class DrainResult:
    """What one pass over the outbox did (on a dry run: what is owed)."""

    objects_deleted: int = 0
    bytes_reclaimed: int = 0
    failed: int = 0
    owed_after: int = 0


def record_deletions(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    source: str,
    bucket: str,
    keys: Sequence[str],
    sizes: Sequence[int | None],
) -> None:
    """Log `keys` and owe their deletion; call inside the transaction that deletes their rows.

    On a dry run the keys are logged (the run's report of what would go) and nothing is owed.
    """
    if not keys:
        return
    conn.execute(
        queries.load("outbox/insert_deletions"),
        {"dag_id": run.dag_id, "run_id": run.run_id, "dry_run": run.dry_run, "source": source,
         "bucket": bucket, "keys": list(keys), "sizes": list(sizes)},
    )


def owed_summary(conn: psycopg.Connection, dag_id: str) -> tuple[int, int, int]:
    """(owed objects, their known bytes, highest attempt count) for one DAG."""
    row = conn.execute(queries.load("outbox/summarize_owed_deletions"), {"dag_id": dag_id}).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def delete_owed_objects(
    conn: psycopg.Connection,
    s3,
    run: RunRef,
    *,
    batch_size: int = MAX_KEYS_PER_CALL,
) -> DrainResult:
    """Delete every object `run.dag_id` owes, one claimed batch per transaction.

    Each owed key is tried once per call; keys that fail stay owed for the next call. An S3 outage
    raises with the current batch rolled back (still owed), so a retry of the task completes it.
    On a dry run nothing is deleted and the result reports what is owed.
    """
    result = DrainResult()
    if run.dry_run:
        result.owed_after = owed_summary(conn, run.dag_id)[0]
        return result
    after = 0
    while True:
        with conn.transaction():
            rows = conn.execute(
                queries.load("outbox/claim_owed_deletions"),
                {"dag_id": run.dag_id, "after": after, "batch_size": batch_size},
            ).fetchall()
            if not rows:
                break
            after = rows[-1][0]
            by_bucket: dict[str, list[tuple[int, str, int | None]]] = defaultdict(list)
            for log_id, bucket, key, size in rows:
                by_bucket[bucket].append((log_id, key, size))
            done_ids: list[int] = []
            failed_ids: list[int] = []
            failed_errors: list[str] = []
            done_bytes = 0
            for bucket, entries in by_bucket.items():
                outcome = delete_objects_in_batches(s3, bucket, [key for _, key, _ in entries])
                for log_id, key, size in entries:
                    if key in outcome.failed:
                        failed_ids.append(log_id)
                        failed_errors.append(outcome.failed[key])
                    else:
                        done_ids.append(log_id)
                        done_bytes += size or 0
            if done_ids:
                conn.execute(queries.load("outbox/complete_owed_deletions"),
                             {"log_ids": done_ids, "run_id": run.run_id})
                add_counts(conn, run, objects=len(done_ids), bytes_=done_bytes)
            if failed_ids:
                conn.execute(queries.load("outbox/record_failed_deletions"),
                             {"log_ids": failed_ids, "errors": failed_errors})
        result.objects_deleted += len(done_ids)
        result.bytes_reclaimed += done_bytes
        result.failed += len(failed_ids)
        log.info("deleted %d objects (%s) from the outbox of %s; %d failed and stay owed",
                 len(done_ids), human_bytes(done_bytes), run.dag_id, len(failed_ids))
        if len(rows) < batch_size:
            break
    result.owed_after = owed_summary(conn, run.dag_id)[0]
    return result
