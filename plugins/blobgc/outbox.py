"""The durable outbox of object deletions: owed in the row-deleting transaction, settled after S3 confirms.

A crash between the database commit and the S3 call leaves the keys owed, and the next drain
deletes them. Keys S3 refuses stay owed with their error. Nothing is forgotten.
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass

import psycopg

from blobgc import queries
from blobgc.objects import MAX_KEYS_PER_CALL, bucket_is_versioned, delete_objects_in_batches
from blobgc.runs import RunRef, add_counts
from blobgc.sizes import human_bytes

log = logging.getLogger(__name__)

# The deletion-log sources whose keys can be needed again: seed 002's content objects (`blobgc.pastes`)
# and seed 001's image files (`blobgc.images`).
PASTE_CONTENT_SOURCE = "app.content"
IMAGE_SOURCE = "app.image"
MEDIA_THUMBNAIL_SOURCE = "media.thumbnails"  # seed 004's orphan thumbnails (a source per shard starts with this)
# Given a draining transaction, the S3 client, the bucket and the claimed keys of one source, yields
# the keys that must be kept and holds the rest so that no new row can claim them until the transaction ends.
KeyGuard = Callable[[psycopg.Connection, object, str, list[str]], AbstractContextManager[set[str]]]


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
    rows: Sequence[str] | None = None,
) -> None:
    """Log `keys` and owe their deletion; call inside the transaction that deletes their rows.

    On a dry run the keys are logged (the run's report of what would go) and nothing is owed.
    `rows` are the deleted rows' images as JSON text (`to_jsonb(row)::text`, never parsed here), for a
    source whose rows blobgc_restore can put back.
    """
    if not keys:
        return
    conn.execute(
        queries.load("outbox/insert_deletions"),
        {"dag_id": run.dag_id, "run_id": run.run_id, "dry_run": run.dry_run, "source": source,
         "bucket": bucket, "keys": list(keys), "sizes": list(sizes),
         "rows": f"[{','.join(rows)}]" if rows else None},
    )


def replace_dry_run_log(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    source: str,
    bucket: str,
    keys: Sequence[str],
    sizes: Sequence[int | None],
    batch_size: int,
) -> int:
    """A dry run's report of what would go: the run's earlier report for `source` replaced (a retry
    writes it again), in log rows of `batch_size` keys. Returns the number of rows."""
    conn.execute(queries.load("outbox/delete_dry_run_log"),
                 {"dag_id": run.dag_id, "run_id": run.run_id, "source": source})
    return record_in_batches(conn, run, source=source, bucket=bucket, keys=keys, sizes=sizes, batch_size=batch_size)


def record_in_batches(conn: psycopg.Connection, run: RunRef, *, source: str, bucket: str, keys: Sequence[str],
                      sizes: Sequence[int | None], batch_size: int) -> int:
    """`record_deletions` in log rows of `batch_size` keys; returns the number of rows."""
    for start in range(0, len(keys), batch_size):
        record_deletions(conn, run, source=source, bucket=bucket, keys=keys[start:start + batch_size],
                         sizes=sizes[start:start + batch_size])
    return -(-len(keys) // batch_size)


def replace_run_log(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    source: str,
    bucket: str,
    keys: Sequence[str],
    sizes: Sequence[int | None],
    batch_size: int,
) -> int:
    """Log and owe (on a dry run: report) everything a task found for `source`, replacing what an
    earlier attempt of the same run logged and still wholly owes. For tasks that find their keys by
    listing, so that a retry lists again without owing (and counting) a key twice. Call in a
    transaction. Returns the number of log rows written."""
    if run.dry_run:
        return replace_dry_run_log(conn, run, source=source, bucket=bucket, keys=keys, sizes=sizes,
                                   batch_size=batch_size)
    conn.execute(queries.load("outbox/delete_unsettled_run_log"),
                 {"dag_id": run.dag_id, "run_id": run.run_id, "source": source})
    return record_in_batches(conn, run, source=source, bucket=bucket, keys=keys, sizes=sizes, batch_size=batch_size)


def owed_summary(conn: psycopg.Connection, dag_id: str) -> tuple[int, int, int]:
    """(owed objects, their known bytes, highest attempt count) for one DAG."""
    row = conn.execute(queries.load("outbox/summarize_owed_deletions"), {"dag_id": dag_id}).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def claim_owed_batches(conn: psycopg.Connection, dag_id: str, after: int, max_keys: int) -> tuple[list[tuple], int]:
    """Lock the next owed log rows of `dag_id` after `after`, about `max_keys` keys in all (at least one row).

    Returns the claimed rows and the log id to continue after. Rows another drain holds are
    skipped; with no owed row left, the position returned is 0.
    """
    candidates = conn.execute(queries.load("outbox/select_owed_batches"), {"dag_id": dag_id, "after": after}).fetchall()
    picked: list[int] = []
    total = 0
    for log_id, n_keys in candidates:
        if picked and total + n_keys > max_keys:
            break
        picked.append(log_id)
        total += n_keys
    if not picked:
        return [], 0
    # binary results: thousands of keys per row parse much faster than text arrays
    rows = conn.execute(queries.load("outbox/claim_owed_deletions"), {"log_ids": picked}, binary=True).fetchall()
    return rows, picked[-1]


def delete_owed_objects(
    conn: psycopg.Connection,
    s3,
    run: RunRef,
    *,
    batch_size: int = MAX_KEYS_PER_CALL,
    concurrency: int = 4,
    workers: int = 1,
    connect: Callable[[], psycopg.Connection] | None = None,
) -> DrainResult:
    """Delete every object `run.dag_id` owes, `concurrency` DeleteObjects calls of `batch_size` keys at a time.

    One transaction claims about `concurrency * batch_size` keys and settles them. With `workers`
    > 1, that many drains run side by side on connections from `connect`, claiming disjoint log rows
    (SKIP LOCKED), so one drain's database work overlaps another's S3 calls.

    Each owed key is tried once per call; keys S3 refuses stay owed (with their errors) for the
    next call. An S3 outage raises with the current batch rolled back (still owed), so a retry of
    the task completes it. On a dry run nothing is deleted and the result reports what is owed.
    """
    result = DrainResult()
    if not run.dry_run:
        if workers > 1 and connect is not None:

            def drain_on_own_connection(_: int) -> DrainResult:
                with connect() as own:
                    return drain(own, s3, run, batch_size, concurrency)

            with ThreadPoolExecutor(workers) as pool:
                parts = list(pool.map(drain_on_own_connection, range(workers)))
        else:
            parts = [drain(conn, s3, run, batch_size, concurrency)]
        for part in parts:
            result.objects_deleted += part.objects_deleted
            result.bytes_reclaimed += part.bytes_reclaimed
            result.failed += part.failed
    result.owed_after = owed_summary(conn, run.dag_id)[0]
    return result


def drain(conn: psycopg.Connection, s3, run: RunRef, batch_size: int, concurrency: int) -> DrainResult:
    """One drain over the owed log rows, in log order, skipping rows another drain holds."""
    result = DrainResult()
    after = 0
    while True:
        with conn.transaction():
            rows, after = claim_owed_batches(conn, run.dag_id, after, batch_size * concurrency)
            if not rows:
                if after == 0:
                    break
                continue  # another drain holds these rows; go on after them
            done, done_bytes, failed = settle_batches(conn, s3, run, rows, batch_size, concurrency)
            add_counts(conn, run, objects=done, bytes_=done_bytes)
        result.objects_deleted += done
        result.bytes_reclaimed += done_bytes
        result.failed += failed
        log.info("deleted %d objects (%s) owed by %s; %d failed and stay owed",
                 done, human_bytes(done_bytes), run.dag_id, failed)
    return result


def key_guard(source: str) -> KeyGuard | None:
    """The guard of a source whose keys can be needed again after they were owed, or None.

    Seed 002's `pastes/{content_hash}` is one: identical content re-uploaded after its old row was
    deleted creates a new row under the same key, and the owed deletion must then keep the object.
    Seed 001's image files are another: a new row can reuse an image id whose last row was deleted.
    Seed 004's orphan thumbnails too: a profile slot's master can be uploaded again meanwhile.
    """
    if source == PASTE_CONTENT_SOURCE:
        from blobgc.pastes import hold_unneeded_contents

        return lambda conn, _s3, _bucket, keys: hold_unneeded_contents(conn, keys)
    if source == IMAGE_SOURCE:
        from blobgc.images import hold_unreferenced_images

        return lambda conn, _s3, _bucket, keys: hold_unreferenced_images(conn, keys)
    if source.startswith(MEDIA_THUMBNAIL_SOURCE):
        from blobgc.media_cleanup import keep_thumbnails_with_a_master

        return keep_thumbnails_with_a_master
    return None


def settle_batches(
    conn: psycopg.Connection, s3, run: RunRef, rows: list[tuple], batch_size: int, concurrency: int
) -> tuple[int, int, int]:
    """Delete the claimed rows' keys (DeleteObjects per bucket and source) and settle each row.

    A source's key guard (`key_guard`) first sets aside the keys a new row needs again; those are
    settled as kept, not deleted, and the guard holds the others until this transaction ends.
    Returns (deleted, their bytes, failed).
    """
    by_group: dict[tuple[str, str], list[str]] = defaultdict(list)
    for _log_id, bucket, source, keys, _sizes in rows:
        by_group[(bucket, source)].extend(keys)
    failures: dict[tuple[str, str], str] = {}
    markers: dict[tuple[str, str], str] = {}
    kept: set[tuple[str, str]] = set()
    versioned = {bucket: bucket_is_versioned(s3, bucket) for bucket, _ in by_group}
    with ExitStack() as guards:
        for (bucket, source), keys in by_group.items():
            guard = key_guard(source)
            needed: set[str] = guards.enter_context(guard(conn, s3, bucket, keys)) if guard else set()
            kept.update((bucket, key) for key in needed)
            outcome = delete_objects_in_batches(s3, bucket, [k for k in keys if k not in needed],
                                                batch_size=min(batch_size, MAX_KEYS_PER_CALL),
                                                concurrency=concurrency, versioned=versioned[bucket])
            failures.update({(bucket, key): error for key, error in outcome.failed.items()})
            markers.update({(bucket, key): version for key, version in outcome.markers.items()})
    done = done_bytes = failed = 0
    for log_id, bucket, _source, keys, sizes in rows:
        pairs = list(zip(keys, sizes, strict=True))
        ok = [(k, sz) for k, sz in pairs if (bucket, k) not in failures and (bucket, k) not in kept]
        bad = [(k, sz) for k, sz in pairs if (bucket, k) in failures]
        conn.execute(queries.load("outbox/settle_owed_deletions"), {
            "log_id": log_id, "run_id": run.run_id,
            "failed_keys": [k for k, _ in bad], "failed_sizes": [sz for _, sz in bad],
            "errors": json.dumps({k: failures[(bucket, k)] for k, _ in bad}) if bad else None,
            "done_keys": [k for k, _ in ok],
            "done_versions": [markers.get((bucket, k)) for k, _ in ok] if versioned[bucket] else None,
            "kept_keys": [k for k, _ in pairs if (bucket, k) in kept],
        })
        done += len(ok)
        done_bytes += sum(sz or 0 for _, sz in ok)
        failed += len(bad)
    if kept:
        log.info("kept %d owed objects that new rows need again", len(kept))
    return done, done_bytes, failed
