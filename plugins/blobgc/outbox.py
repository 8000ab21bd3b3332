"""The durable outbox of object deletions: owed in the row-deleting transaction, settled after S3 confirms.

A crash between the database commit and the S3 call leaves the keys owed, and the next drain
deletes them. Keys S3 refuses stay owed with their error. Nothing is forgotten.
"""
from __future__ import annotations

import json
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


def claim_owed_batches(conn: psycopg.Connection, dag_id: str, after: int, max_keys: int) -> list[tuple]:
    """Lock the next owed log rows of `dag_id` after `after`, about `max_keys` keys in all (at least one row)."""
    candidates = conn.execute(queries.load("outbox/select_owed_batches"), {"dag_id": dag_id, "after": after}).fetchall()
    picked: list[int] = []
    total = 0
    for log_id, n_keys in candidates:
        if picked and total + n_keys > max_keys:
            break
        picked.append(log_id)
        total += n_keys
    if not picked:
        return []
    # binary results: thousands of keys per row parse much faster than text arrays
    return conn.execute(queries.load("outbox/claim_owed_deletions"), {"log_ids": picked}, binary=True).fetchall()


def delete_owed_objects(
    conn: psycopg.Connection,
    s3,
    run: RunRef,
    *,
    batch_size: int = MAX_KEYS_PER_CALL,
    concurrency: int = 4,
) -> DrainResult:
    """Delete every object `run.dag_id` owes, `concurrency` DeleteObjects calls of `batch_size` keys at a time.

    One transaction claims about `concurrency * batch_size` keys and settles them.

    Each owed key is tried once per call; keys S3 refuses stay owed (with their errors) for the
    next call. An S3 outage raises with the current batch rolled back (still owed), so a retry of
    the task completes it. On a dry run nothing is deleted and the result reports what is owed.
    """
    result = DrainResult()
    if not run.dry_run:
        after = 0
        while True:
            with conn.transaction():
                rows = claim_owed_batches(conn, run.dag_id, after, batch_size * concurrency)
                if not rows:
                    break
                after = rows[-1][0]
                done, done_bytes, failed = settle_batches(conn, s3, run, rows, batch_size, concurrency)
                add_counts(conn, run, objects=done, bytes_=done_bytes)
            result.objects_deleted += done
            result.bytes_reclaimed += done_bytes
            result.failed += failed
            log.info("deleted %d objects (%s) owed by %s; %d failed and stay owed",
                     done, human_bytes(done_bytes), run.dag_id, failed)
    result.owed_after = owed_summary(conn, run.dag_id)[0]
    return result


def settle_batches(
    conn: psycopg.Connection, s3, run: RunRef, rows: list[tuple], batch_size: int, concurrency: int
) -> tuple[int, int, int]:
    """Delete the claimed rows' keys (DeleteObjects per bucket) and settle each row; return (done, bytes, failed)."""
    by_bucket: dict[str, list[str]] = defaultdict(list)
    for _log_id, bucket, keys, _sizes in rows:
        by_bucket[bucket].extend(keys)
    failures: dict[tuple[str, str], str] = {}
    for bucket, keys in by_bucket.items():
        outcome = delete_objects_in_batches(s3, bucket, keys, batch_size=min(batch_size, MAX_KEYS_PER_CALL),
                                            concurrency=concurrency)
        failures.update({(bucket, key): error for key, error in outcome.failed.items()})
    done = done_bytes = failed = 0
    for log_id, bucket, keys, sizes in rows:
        ok = [(k, sz) for k, sz in zip(keys, sizes, strict=True) if (bucket, k) not in failures]
        bad = [(k, sz) for k, sz in zip(keys, sizes, strict=True) if (bucket, k) in failures]
        if not bad:
            conn.execute(queries.load("outbox/complete_owed_deletions"),
                         {"log_id": log_id, "run_id": run.run_id, "keys": keys})
        else:
            conn.execute(queries.load("outbox/record_failed_deletions"), {
                "log_id": log_id, "run_id": run.run_id,
                "failed_keys": [k for k, _ in bad], "failed_sizes": [sz for _, sz in bad],
                "done_keys": [k for k, _ in ok],
                "errors": json.dumps({k: failures[(bucket, k)] for k, _ in bad}),
            })
        done += len(ok)
        done_bytes += sum(sz or 0 for _, sz in ok)
        failed += len(bad)
    return done, done_bytes, failed
