"""Owed cache purges: the cache keys of deleted rows, recorded with the deletion and unlinked from Redis afterwards.

Like the object outbox: the keys are inserted into `blobgc.cache_purge` in the transaction that
deletes their rows, and a row goes only after Redis has answered. A Redis outage leaves the rows
owed (with the error) and fails the task, so a retry or the next run completes the purge. Unlinking
is idempotent, so purging a key twice is harmless; a key that was never cached is a no-op.

On Redis Cluster a variadic `UNLINK` must not span hash slots (CROSSSLOT): the keys are grouped by
slot, one `UNLINK` per slot group, still pipelined (the cluster client sends each node its commands).
Standalone Redis keeps one variadic `UNLINK` per 1000 keys.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from redis import Redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisError

from blobgc.core import queries
from blobgc.core.objects import chunked
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef

log = logging.getLogger(__name__)

KEYS_PER_COMMAND = 1000  # one variadic UNLINK per up to 1000 keys


class CachePurgeError(RuntimeError):
    """Redis failed; the claimed purges stay owed for the next attempt."""


@dataclass
class PurgeResult(TaskResult):
    """Keys unlinked, how many of them were cached, Redis round trips; on a dry run, the keys owed."""

    keys_purged: int = 0
    keys_found: int = 0
    round_trips: int = 0
    keys_owed: int = 0


def unlink_groups(redis: Redis | RedisCluster, keys: Sequence[str]) -> list[Sequence[str]]:
    """The keys as the variadic UNLINKs that send them: up to 1000 a command, and on Redis Cluster one hash
    slot a command (a multi-key command across slots fails with CROSSSLOT)."""
    if not isinstance(redis, RedisCluster):
        return list(chunked(keys, KEYS_PER_COMMAND))
    by_slot: dict[int, list[str]] = {}
    for key in keys:
        slot = redis.keyslot(key)  # type: ignore[no-untyped-call]  # redis-py leaves RedisCluster.keyslot unannotated
        by_slot.setdefault(slot, []).append(key)
    return [chunk for slot in sorted(by_slot) for chunk in chunked(by_slot[slot], KEYS_PER_COMMAND)]


def owe_cache_purge(conn: psycopg.Connection, run: RunRef, keys: Sequence[str]) -> None:
    """Owe the purge of `keys`; call inside the transaction that deletes their rows."""
    if keys and not run.dry_run:
        conn.execute(
            queries.load("cache/insert_cache_purge"), {"dag_id": run.dag_id, "run_id": run.run_id, "keys": list(keys)}
        )


def owed_cache_keys(conn: psycopg.Connection, dag_id: str) -> int:
    return int(queries.one_row(conn.execute(queries.load("cache/summarize_owed_cache_purges"), {"dag_id": dag_id}))[0])


def purge_owed_cache_keys(
    conn: psycopg.Connection,
    redis: Redis | RedisCluster,
    run: RunRef,
    *,
    rows_per_round_trip: int = 10,
) -> PurgeResult:
    """Unlink every cache key `run.dag_id` owes: one pipelined round trip per claimed group of rows.

    A row holds at most 1000 keys (one expiry batch), sent as one variadic `UNLINK`; up to
    `rows_per_round_trip` of them share a pipeline. Rows are claimed with FOR UPDATE SKIP LOCKED,
    so concurrent purges never send the same row twice, and deleted only once Redis answered.
    """
    result = PurgeResult()
    if run.dry_run:
        result.keys_owed = owed_cache_keys(conn, run.dag_id)
        log.info("dry run: %d cache keys are owed a purge; nothing sent to Redis", result.keys_owed)
        return result
    after = 0
    while True:
        failure: RedisError | None = None
        with conn.transaction():
            rows = conn.execute(
                queries.load("cache/claim_cache_purges"),
                {"dag_id": run.dag_id, "after": after, "limit": rows_per_round_trip},
                binary=True,
            ).fetchall()
            if not rows:
                break
            after = rows[-1][0]
            ids = [row_id for row_id, _ in rows]
            pipe = redis.pipeline(transaction=False)
            n_keys = 0
            for _, keys in rows:
                for group in unlink_groups(redis, keys):
                    pipe.unlink(*group)
                    n_keys += len(group)
            try:
                found = sum(pipe.execute())
            except RedisError as error:
                failure = error
                conn.execute(
                    queries.load("cache/record_cache_purge_failure"),
                    {"ids": ids, "error": f"{type(error).__name__}: {error}"},
                )
            else:
                conn.execute(queries.load("cache/delete_cache_purges"), {"ids": ids})
        if failure is not None:
            owed = owed_cache_keys(conn, run.dag_id)
            raise CachePurgeError(
                f"Redis failed ({failure}); {owed} cache keys stay owed for the next attempt"
            ) from failure
        result.keys_purged += n_keys
        result.keys_found += found
        result.round_trips += 1
        log.info("purged %d cache keys (%d were cached) in one round trip", n_keys, found)
    result.keys_owed = owed_cache_keys(conn, run.dag_id)
    return result
