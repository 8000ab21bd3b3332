"""The durable outbox of object deletions: owed in the row-deleting transaction, settled after S3 confirms.

A crash between the database commit and the S3 call leaves the keys owed, and the next drain
deletes them. Keys S3 refuses stay owed with their error. Nothing is forgotten.

**Every source has a drain-time guard**, named by its key layout (`blobgc.core.keys`): just before
deleting, in the draining transaction, it sets aside the keys that a row accounts for again (a
paste re-created, an image id reused, a blob row inserted after reconcile listed its object) and
holds the rest.

**Only what existed is counted.** A key whose size was recorded when its object was written counts
with that size. For a key of unknown size (a collection without a `size` column, a thumbnail that may
never have been made), the drain asks the store, in bulk and ahead of its claims (`ListedAhead`: the
next 100,000 such owed keys at a time, through `blobgc.core.objects.object_stats`, which lists their
key ranges side by side, 1000 objects a page, and HEADs only keys too sparse for a listing to pay);
an answer is used within `READ_AHEAD_MAX_AGE` seconds of being asked, or asked again. A key that is
absent is settled as such, never counted, and gets no delete marker on a versioned bucket. A key
logged with `modified_before` (an orphan judged by an inventory report's LastModified) is asked just
before its own claim is deleted, never ahead, and kept when its object was written at or after that
moment.

**One bad row never wedges the rest.** Failures are isolated per bucket and per key. A failure no
retry can fix (NoSuchBucket, AccessDenied) is tried again with backoff and, after `PARK_AFTER`
attempts, parked: still owed, shown in the reclaim report and the `.parked` metric, skipped by
drains until an operator unparks it (`unpark_owed_deletions`). A whole call refused so (the bucket is
missing, or refuses blobgc) is also returned (`DrainResult.refused`): the DAG's last drain task fails on
it at once, without retries, naming the bucket and what points at it. A key its guard cannot judge (a
collection the file no longer declares, a key no template forms) is parked at once, with the guard's
reason, and the rest of the drain goes on. A transient failure (S3 down,
throttled) keeps its keys owed and fails the task after the rest has drained, so Airflow retries it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from botocore.exceptions import BotoCoreError, ClientError

from blobgc.core import keys as key_layouts
from blobgc.core import queries
from blobgc.core.collections import collection_of_source
from blobgc.core.lifecycle import KEEPS_EVERY_VERSION, BucketState, bucket_state, record_bucket, suggested_rule
from blobgc.core.objects import (
    ACCESS_DENIED_CODES,
    MAX_KEYS_PER_CALL,
    ObjectStat,
    ObjectStore,
    StoreUnknown,
    delete_objects_in_batches,
    error_code,
    is_transient,
    object_stats,
)
from blobgc.core.quarantine import (
    NO_QUARANTINE,
    Quarantined,
    QuarantinePolicy,
    QuarantineUnknown,
    changed_since_copied,
    delete_copies,
    held_copies,
    move_into_quarantine,
    quarantine_key,
    record_quarantined,
)
from blobgc.core.rate import CappedStore
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef, add_collection_counts, add_counts
from blobgc.core.sizes import human_bytes

log = logging.getLogger(__name__)

# The deletion-log sources whose keys can be needed again: seed 002's content objects (`blobgc.pastes`)
# and seed 001's image files (`blobgc.images`).
PARK_AFTER = 5  # failures no retry can fix, in a row, before a row is parked
BACKOFF_BASE = timedelta(minutes=1)  # the wait after the second such failure, quadrupled after each further one
BACKOFF_MAX = timedelta(hours=6)
# An upload intent is due to the drain only this long after it was owed: longer than any upload takes, so a drain
# never claims the intent of a writer still uploading (which would wait for the writer's lock while the writer
# waits to cancel the intent: a deadlock that fails the upload). A writer that died is cleaned up after it.
UPLOAD_INTENT_HOLD = timedelta(hours=1)
DEFAULT_BUCKET = "blobgc"  # Variable blobgc_bucket's default: the bucket a collection without its own is in
# Keys of unknown size are listed ahead of the claims, this many owed keys at a time (from at most READ_AHEAD_ROWS log
# rows), so that listing pages hold many of them; an answer older than READ_AHEAD_MAX_AGE is asked again.
READ_AHEAD_KEYS = 100_000
READ_AHEAD_ROWS = 200
READ_AHEAD_MAX_AGE = 30.0  # seconds
READ_AHEAD_MIN_KEYS = 4_000  # a window listing more slowly than READ_AHEAD_MAX_AGE / 3 halves, down to this


@dataclass
class DrainResult(TaskResult):
    """What one pass over the outbox did (on a dry run: what is owed)."""

    objects_deleted: int = 0
    bytes_reclaimed: int = 0  # gone from storage: deleted from an unversioned bucket
    bytes_deleted: int = 0  # taken out of the buckets' view: reclaimed, moved into quarantine, or now noncurrent
    quarantined: int = 0  # of the objects deleted, those moved into quarantine first
    noncurrent: int = 0  # of the objects deleted, those whose bytes a versioned bucket keeps as noncurrent versions
    failed: int = 0
    absent: int = 0
    owed_after: int = 0
    parked: int = 0
    errors: list[BaseException] = local()  # transient failures of whole calls
    # whole calls refused for good (NoSuchBucket, AccessDenied), first per bucket: bucket -> (source, error); the keys
    # stay owed, and the DAG's last drain step fails at once naming the bucket (`blobgc.dag_kit.unfixable`)
    refused: dict[str, tuple[str, BaseException]] = local(dict)
    by_collection: dict[str, tuple[int, int, int]] = local(dict)  # collection -> (objects, reclaimed, deleted bytes)
    # buckets whose deletions only add delete markers, with no rule to expire the noncurrent versions
    keeps_every_version: list[str] = local(list)

    def add(self, other: DrainResult) -> None:
        """Count `other`'s work in this result too."""
        for name in (
            "objects_deleted",
            "bytes_reclaimed",
            "bytes_deleted",
            "quarantined",
            "noncurrent",
            "failed",
            "absent",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors
        for bucket, refusal in other.refused.items():
            self.refused.setdefault(bucket, refusal)
        self.keeps_every_version += [b for b in other.keeps_every_version if b not in self.keeps_every_version]


class OwedDeletionsParked(RuntimeError):
    """Owed deletions that kept failing are parked: the drain did the rest, and the task fails so that on-call looks."""


@dataclass(frozen=True)
class DrainPolicy:
    """When failing rows back off and park."""

    park_after: int = PARK_AFTER
    backoff_base: timedelta = BACKOFF_BASE
    backoff_max: timedelta = BACKOFF_MAX

    def backoff(self, failures: int) -> timedelta:
        """The wait before the next attempt after `failures` permanent failures in a row (none after the first)."""
        if failures <= 1:
            return timedelta(0)
        factor: int = 4 ** (failures - 2)  # an int: failures >= 2 here (typeshed types int ** int as Any)
        return min(self.backoff_max, self.backoff_base * factor)


DEFAULT_POLICY = DrainPolicy()


# what was listed ahead of one bucket's owed keys: key -> its object (size, LastModified), or None when it was not there
Listed = Mapping[str, ObjectStat | None]


@dataclass(frozen=True)
class Window:
    """What one listing ahead asked: the due log rows `first`..`last`, when, and bucket -> what was listed."""

    first: int
    last: int
    middle: int  # the log id of the row halfway through: once claims pass it, the next window is listed
    asked: float
    listed: dict[str, Listed]


@dataclass(frozen=True)
class Owed:
    """The keys of unknown size of a run of due log rows, by bucket, to be listed ahead."""

    first: int
    last: int
    middle: int
    wanted: dict[str, list[str]]


class ListedAhead:
    """Which objects of owed keys of unknown size exist, and their sizes, learnt in bulk ahead of the claims.

    A claim holds a few thousand keys; where they are scattered over a bucket (content-addressed keys, claimed in
    log order), a listing page holds few of them, and each would be asked with a HEAD. So the keys of unknown size
    that the next `keys` owed keys hold are asked together (`blobgc.core.objects.object_stats`: their ranges listed
    side by side, 1000 objects a page, HEAD only where they are sparse), and the claims then take their answers.
    Once the claims are halfway through a window, the next one is listed in the background while they go on.
    Shared by the drains side by side (one lists while the other waits for the answer it needs too). An answer is
    used for at most `max_age` seconds after it was asked; a claim not covered by a fresh one lists ahead again.
    Keys logged with `modified_before` are never taken from here: their age is asked just before they are deleted.
    A listing that fails (S3 down, access denied) leaves its bucket's keys to the claim's own asking, which handles
    the failure as before. Close it (or use it as a context manager) to stop a background listing.
    """

    def __init__(
        self,
        dag_id: str,
        *,
        keys: int = READ_AHEAD_KEYS,
        rows: int = READ_AHEAD_ROWS,
        max_age: float = READ_AHEAD_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dag_id, self.keys, self.rows, self.max_age, self.clock = dag_id, keys, rows, max_age, clock
        self.lock = threading.Lock()
        self.window: Window | None = None
        self.pending: tuple[Owed, Future[Window]] | None = None  # the next window, being listed
        self.background = ThreadPoolExecutor(1, thread_name_prefix="blobgc-list-ahead")
        self.listings = 0  # windows listed so far
        # (bucket, key) -> when these drains deleted it: a key owed twice (content shared by two rows) is not there
        # for a later claim any more, though a listing asked before the delete says it is
        self.gone: dict[tuple[str, str], float] = {}
        self.gone_pruned: float | None = None  # the window whose asking `gone` was last pruned by

    def __enter__(self) -> ListedAhead:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.background.shutdown(wait=True, cancel_futures=True)

    def for_rows(self, conn: psycopg.Connection, s3: ObjectStore, rows: list[tuple[Any, ...]]) -> dict[str, Listed]:
        """bucket -> what was listed of the claimed `rows`' keys of unknown size, listing ahead from the first of
        them when no fresh answer covers them all."""
        asking = [row for row in rows if has_unknown_sizes(row)]
        if not asking:
            return {}
        ids = [row[0] for row in asking]
        low, high = min(ids), max(ids)
        with self.lock:
            if self.pending is not None and self.pending[0].last < low:
                self.pending = None  # the claims are past it (other drains took its rows)
            window = self.window if self.covers(self.window, low, high) else None
            if (
                window is None
                and self.pending is not None
                and self.pending[0].first <= low <= high <= self.pending[0].last
            ):
                window = self.pending[1].result()  # listed in the background: wait for the rest of it
                self.pending = None
                window = window if self.covers(window, low, high) else None
            if window is None:
                window = self.list_window(s3, self.owed_from(conn, low, high))
            self.window = window
            if self.pending is None and high >= window.middle:
                following = self.owed_from(conn, window.last + 1, window.last + 1)
                if following.wanted:
                    self.pending = following, self.background.submit(self.list_window, s3, following)
            # deleted before this window was asked: its listing knows; since: gone, whatever the listing said
            if window.asked != self.gone_pruned:
                self.gone = {k: when for k, when in self.gone.items() if when >= window.asked}
                self.gone_pruned = window.asked
            answers: dict[str, dict[str, ObjectStat | None]] = defaultdict(dict)
            for _log_id, bucket, _source, keys, _sizes, *_rest in asking:
                listed: Listed = window.listed.get(bucket) or {}
                for key in keys:
                    if key in listed:
                        answers[bucket][key] = None if (bucket, key) in self.gone else listed[key]
            return dict(answers)

    def deleted(self, bucket: str, keys: Sequence[str]) -> None:
        """Record that these drains just deleted `keys` of `bucket` (see `gone`)."""
        with self.lock:
            now = self.clock()
            self.gone.update({(bucket, key): now for key in keys})

    def covers(self, window: Window | None, low: int, high: int) -> bool:
        """Whether `window` answers for log rows `low`..`high`, and is still fresh."""
        return (
            window is not None
            and window.first <= low
            and high <= window.last
            and self.clock() - window.asked <= self.max_age
        )

    def owed_from(self, conn: psycopg.Connection, first: int, through: int) -> Owed:
        """The keys of unknown size of the due log rows from `first` on: at least through log id `through`, then on
        until about `keys` keys."""
        wanted: dict[str, list[str]] = defaultdict(list)
        last, total, read = through, 0, []
        rows = conn.execute(
            queries.load("outbox/select_owed_keys_ahead"),
            {"dag_id": self.dag_id, "first": first, "rows": self.rows},
            binary=True,
        ).fetchall()
        seen: dict[tuple[str, str], int] = defaultdict(int)
        for log_id, bucket, keys, sizes, judged_by_age in rows:
            if total >= self.keys and log_id > through:
                break
            last = max(last, log_id)
            read.append(log_id)
            for key in keys:
                seen[(bucket, key)] += 1
            if judged_by_age:
                continue
            unknown = [k for k, size in zip(keys, sizes, strict=True) if size is None]
            wanted[bucket] += unknown
            total += len(unknown)
        # a key owed by more than one row here (content shared by two rows) is asked by each claim itself, just
        # before it deletes: two drains side by side must not both count it from one answer
        once = {b: [k for k in dict.fromkeys(keys) if seen[(b, k)] == 1] for b, keys in wanted.items()}
        return Owed(first, last, read[len(read) // 2] if read else last, {b: k for b, k in once.items() if k})

    def list_window(self, s3: ObjectStore, owed: Owed) -> Window:
        """Ask the store about `owed` keys, bucket by bucket."""
        asked = self.clock()
        listed: dict[str, Listed] = {}
        for bucket, keys in owed.wanted.items():
            try:
                stats = object_stats(s3, bucket, keys)
            except (ClientError, BotoCoreError, StoreUnknown) as error:
                log.info(
                    "could not list ahead %d owed keys in %s (%s): each claim asks for its own",
                    len(keys),
                    bucket,
                    error_code(error),
                )
                continue
            listed[bucket] = {k: stats.get(k) for k in keys}
        self.listings += 1
        if self.clock() - asked > self.max_age / 3 and self.keys > READ_AHEAD_MIN_KEYS:
            # answers must be used before they are max_age old: where listing is slow (sparse keys HEADed, a
            # throttled store), later windows are smaller, so that a window is not stale before its claims come
            self.keys = max(READ_AHEAD_MIN_KEYS, self.keys // 2)
        log.info(
            "listed ahead %d owed keys of unknown size (log rows %d..%d) in %.2fs: %d exist",
            sum(len(keys) for keys in owed.wanted.values()),
            owed.first,
            owed.last,
            self.clock() - asked,
            sum(1 for answers in listed.values() for stat in answers.values() if stat is not None),
        )
        return Window(owed.first, owed.last, owed.middle, asked, listed)


def has_unknown_sizes(row: tuple[Any, ...]) -> bool:
    """Whether a claimed log row owes a key of unknown size that is not judged by its age (`modified_before`)."""
    _log_id, _bucket, _source, _keys, sizes, _failures, modified_before, _owner = row
    return modified_before is None and any(size is None for size in sizes)


def record_deletions(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    source: str,
    bucket: str,
    keys: Sequence[str],
    sizes: Sequence[int | None],
    rows: Sequence[str] | None = None,
    part: str = "",
    modified_before: datetime | None = None,
) -> None:
    """Log `keys` and owe their deletion; call inside the transaction that deletes their rows.

    With `modified_before` (an orphan judged by a stale LastModified, as an inventory report's), the drain asks
    the store for each object just before deleting it and keeps one written at or after that moment.

    A dry run logs and owes nothing: its report is its plan (`blobgc.core.plans.add_plan_item`). `rows` are the
    deleted rows' images as
    JSON text (`to_jsonb(row)::text`, never parsed here), for a source whose rows blobgc_restore can
    put back.
    """
    if not keys or run.dry_run:
        return
    conn.execute(
        queries.load("outbox/insert_deletions"),
        {
            "dag_id": run.dag_id,
            "run_id": run.run_id,
            "dry_run": run.dry_run,
            "source": source,
            "bucket": bucket,
            "keys": list(keys),
            "sizes": list(sizes),
            "rows": f"[{','.join(rows)}]" if rows else None,
            "part": part,
            "modified_before": modified_before,
        },
    )


def owe_upload_intent(
    conn: psycopg.Connection,
    *,
    dag_id: str,
    run_id: str,
    source: str,
    bucket: str,
    keys: Sequence[str],
    sizes: Sequence[int | None],
) -> int:
    """Owe the deletion of objects about to be uploaded (an intent), before uploading them; returns its log id.

    A writer that dies mid-upload leaves the objects owed to `dag_id`'s drain, never orphaned; the drain
    takes them once `UPLOAD_INTENT_HOLD` has passed. The writer cancels the intent (`cancel_upload_intent`)
    in the transaction that inserts the rows that account for the objects, or once it has removed what it
    uploaded.
    """
    with conn.transaction():
        (log_id,) = queries.one_row(
            conn.execute(
                queries.load("outbox/insert_upload_intent"),
                {
                    "dag_id": dag_id,
                    "run_id": run_id,
                    "source": source,
                    "bucket": bucket,
                    "keys": list(keys),
                    "sizes": list(sizes),
                    "hold": UPLOAD_INTENT_HOLD,
                },
            )
        )
    return int(log_id)


def cancel_upload_intent(conn: psycopg.Connection, log_id: int) -> None:
    """The objects of an intent are accounted for (or gone): nothing is owed, and it was never a deletion."""
    conn.execute(queries.load("outbox/delete_upload_intent"), {"log_id": log_id})


def owed_summary(conn: psycopg.Connection, dag_id: str) -> tuple[int, int, int, int]:
    """(owed objects, their known bytes, highest attempt count, parked objects) for one DAG."""
    row = queries.one_row(conn.execute(queries.load("outbox/summarize_owed_deletions"), {"dag_id": dag_id}))
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def unpark_owed_deletions(conn: psycopg.Connection, dag_id: str, log_ids: Sequence[int] | None = None) -> int:
    """Put parked deletions of `dag_id` (all, or those of `log_ids`) back in line, due at once; returns how many rows.

    For on-call, once the cause is fixed (the bucket exists again, the policy allows deletes).
    """
    with conn.transaction():
        rows = conn.execute(
            queries.load("outbox/unpark_owed_deletions"),
            {"dag_id": dag_id, "log_ids": list(log_ids) if log_ids is not None else None},
        ).fetchall()
    log.info("unparked %d owed log rows of %s", len(rows), dag_id)
    return len(rows)


def claim_owed_batches(
    conn: psycopg.Connection, dag_id: str, after: int, max_keys: int
) -> tuple[list[tuple[Any, ...]], int]:
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
    s3: ObjectStore,
    run: RunRef,
    *,
    batch_size: int = MAX_KEYS_PER_CALL,
    concurrency: int = 4,
    workers: int = 1,
    connect: Callable[[], psycopg.Connection] | None = None,
    policy: DrainPolicy = DEFAULT_POLICY,
    default_bucket: str = DEFAULT_BUCKET,
    quarantine: QuarantinePolicy = NO_QUARANTINE,
) -> DrainResult:
    """Delete every object `run.dag_id` owes, `concurrency` DeleteObjects calls of `batch_size` keys at a time.

    One transaction claims about `concurrency * batch_size` keys and settles them. With `workers`
    > 1, that many drains run side by side on connections from `connect`, claiming disjoint log rows
    (SKIP LOCKED), so one drain's database work overlaps another's S3 calls.

    Each owed key is tried once per call. Keys S3 refuses stay owed (with their errors); rows that
    keep failing back off and are parked (`DrainPolicy`). A transient failure of a whole call (S3
    down) keeps that bucket's keys owed; once every other due row is drained, the first such error
    is raised, so a retry of the task completes the work. On a dry run nothing is deleted and the
    result reports what is owed. An object whose source or bucket has days of `quarantine` is moved into
    quarantine instead (`blobgc.core.quarantine`): copied aside, verified, then deleted.
    """
    result = DrainResult()
    if not run.dry_run:
        # shared: the drains side by side claim from the same log rows
        with ListedAhead(run.dag_id) as ahead:
            if workers > 1 and connect is not None:

                def drain_on_own_connection(_: int) -> DrainResult:
                    with connect() as own:
                        return drain(own, s3, run, batch_size, concurrency, policy, default_bucket, quarantine, ahead)

                with ThreadPoolExecutor(workers) as pool:
                    parts = list(pool.map(drain_on_own_connection, range(workers)))
            else:
                parts = [drain(conn, s3, run, batch_size, concurrency, policy, default_bucket, quarantine, ahead)]
        for part in parts:
            result.add(part)
    for bucket in result.keeps_every_version:
        log.warning(
            "bucket %s is versioned: %s. Add one, e.g.: %s", bucket, KEEPS_EVERY_VERSION, suggested_rule(bucket)
        )
    owed, _bytes, _attempts, parked = owed_summary(conn, run.dag_id)
    result.owed_after, result.parked = owed, parked
    if parked:
        log.error(
            "%d owed deletions of %s are parked after failing %d times: see blobgc.outbox (parked_at, "
            "last_errors); fix the cause, then unpark them",
            parked,
            run.dag_id,
            policy.park_after,
        )
    if result.errors:
        raise result.errors[0]
    return result


def drain(
    conn: psycopg.Connection,
    s3: ObjectStore,
    run: RunRef,
    batch_size: int,
    concurrency: int,
    policy: DrainPolicy = DEFAULT_POLICY,
    default_bucket: str = DEFAULT_BUCKET,
    quarantine: QuarantinePolicy = NO_QUARANTINE,
    ahead: ListedAhead | None = None,
) -> DrainResult:
    """One drain over the due owed log rows, in log order, skipping rows another drain holds.

    A bucket that failed transiently is not called again in this drain: its later rows are settled
    as failed with the same error at once, so an outage costs one round of retries, not one per row.
    Keys of unknown size are asked of the store ahead of the claims, in bulk (`ListedAhead`, shared with the
    drains beside this one).
    """
    if ahead is None:
        with ListedAhead(run.dag_id) as own:
            return drain(conn, s3, run, batch_size, concurrency, policy, default_bucket, quarantine, own)
    result = DrainResult()
    down: dict[str, BaseException] = {}
    states: dict[str, BucketState] = {}  # each bucket's versioning and lifecycle, read once per drain
    after = 0
    while True:
        with conn.transaction():
            rows, after = claim_owed_batches(conn, run.dag_id, after, claim_size(s3, batch_size * concurrency))
            if not rows:
                if after == 0:
                    break
                continue  # another drain holds these rows; go on after them
            settled = settle_batches(
                conn,
                s3,
                run,
                rows,
                batch_size,
                concurrency,
                policy,
                down,
                default_bucket,
                quarantine,
                states,
                listed=ahead.for_rows(conn, s3, [row for row in rows if row[1] not in down]),
                deleted=ahead.deleted,
            )
            add_counts(
                conn,
                run,
                objects=settled.objects_deleted,
                bytes_=settled.bytes_reclaimed,
                bytes_deleted=settled.bytes_deleted,
            )
            for collection, (objects, reclaimed, deleted) in settled.by_collection.items():
                add_collection_counts(conn, run, collection, objects=objects, bytes_=reclaimed, bytes_deleted=deleted)
        result.add(settled)
        log.info(
            "deleted %d objects (%s) owed by %s: %d moved into quarantine, %d left as noncurrent versions, %s "
            "reclaimed; %d were already absent; %d failed and stay owed",
            settled.objects_deleted,
            human_bytes(settled.bytes_deleted),
            run.dag_id,
            settled.quarantined,
            settled.noncurrent,
            human_bytes(settled.bytes_reclaimed),
            settled.absent,
            settled.failed,
        )
    return result


def claim_size(s3: ObjectStore, keys: int) -> int:
    """Keys one claim takes: `keys`, or fewer under a rate cap (`blobgc.core.rate.CappedStore.claim_keys`), so that
    a claim's transaction, which holds its rows while their objects are deleted, stays a few seconds long."""
    return min(keys, s3.claim_keys()) if isinstance(s3, CappedStore) else keys


@dataclass(slots=True)
class KeyOutcome:
    """What the drain did with one owed key: deleted (with its size and delete marker), kept, absent, or failed."""

    outcome: str  # deleted | kept | absent | failed
    size: int | None = None
    marker: str | None = None
    error: str | None = None
    permanent: bool = False
    park_now: bool = False  # a guard could not judge the key: no retry will, so it is parked at once
    held: Quarantined | None = None  # deleted after it was copied into quarantine


def delete_group(
    conn: psycopg.Connection,
    s3: ObjectStore,
    guards: ExitStack,
    bucket: str,
    source: str,
    keys: list[str],
    batch_size: int,
    concurrency: int,
    states: dict[str, BucketState],
    sizes_logged: dict[str, int | None],
    modified_before: dict[str, datetime] | None = None,
    *,
    default_bucket: str = DEFAULT_BUCKET,
    quarantine_days: int = 0,
    targets: dict[str, str] | None = None,
    listed: Listed | None = None,
) -> dict[str, KeyOutcome]:
    """One bucket's keys of one source: guard, ask the store which exist, delete those. Raises on a whole-call failure.

    A key with a `modified_before` moment is asked of the store whatever its logged size, and kept when its
    object was written at or after that moment (written again since it was judged an orphan). With
    `quarantine_days`, each existing object is first copied to its quarantine key (`targets`) and verified; one whose
    copy fails stays owed, and a key found absent whose copy exists (moved by a drain that failed before it
    recorded so) is settled as moved. A key of unknown size that `listed` answers for (listed ahead of the claim,
    `ListedAhead`) takes that answer: its size, or absent."""
    layout = key_layouts.layout(source, default_bucket=default_bucket)
    verdict = guards.enter_context(layout.hold(conn, s3, bucket, keys)) if layout else key_layouts.Verdict()
    outcomes = {key: KeyOutcome("kept") for key in keys if key in verdict.keep}
    if verdict.stay_owed:
        log.warning(
            "%d owed keys of %s in %s stay owed%s: %s",
            len(verdict.stay_owed),
            source,
            bucket,
            ", parked" if verdict.park else "",
            next(iter(verdict.stay_owed.values())),
        )
    outcomes.update(
        {
            key: KeyOutcome("failed", error=why[:500], permanent=verdict.park, park_now=verdict.park)
            for key, why in verdict.stay_owed.items()
        }
    )
    todo = [k for k in keys if k not in outcomes]
    if not todo:
        return outcomes
    if bucket not in states:
        states[bucket] = bucket_state(s3, bucket)
    # a size recorded when the object was written is its size; a key of unknown size was listed ahead of the claim,
    # or is asked of the store now, as is a key whose age must be checked again
    modified_before = modified_before or {}
    present: dict[str, int | None] = {
        k: sizes_logged[k] for k in todo if sizes_logged.get(k) is not None and k not in modified_before
    }
    answered = {k for k in todo if k not in present and k not in modified_before and k in (listed or {})}
    for key in answered:
        if (stat := (listed or {})[key]) is not None:
            present[key] = stat.size  # not there when listed: settled as absent below, never counted
    unknown = [k for k in todo if k not in present and k not in answered]
    try:
        stats = object_stats(s3, bucket, unknown) if unknown else {}
        rewritten = {k for k, stat in stats.items() if k in modified_before and stat.modified >= modified_before[k]}
        if rewritten:
            log.info("kept %d owed objects of %s written again since they were judged orphans", len(rewritten), source)
            outcomes.update({k: KeyOutcome("kept") for k in rewritten})
            todo = [k for k in todo if k not in rewritten]
        present.update({k: stat.size for k, stat in stats.items() if k not in rewritten})
    except ClientError as error:
        if error_code(error) not in ACCESS_DENIED_CODES:
            raise
        # may delete but neither list nor read: such keys are taken to exist, their bytes unknown; a key whose age
        # must be checked again is never deleted unchecked: it stays owed, failed (and parks if this persists)
        unchecked = [k for k in unknown if k in modified_before]
        log.warning(
            "may not list or HEAD %s (%s): %d owed keys of unknown size are deleted without checking that "
            "they exist; %d whose age must be checked stay owed",
            bucket,
            error_code(error),
            len(unknown) - len(unchecked),
            len(unchecked),
        )
        outcomes.update(
            {
                k: KeyOutcome("failed", error=f"{error_code(error)}: cannot check the object's age", permanent=True)
                for k in unchecked
            }
        )
        todo = [k for k in todo if k not in unchecked]
        present.update({k: None for k in unknown if k not in modified_before})
    outcomes.update({key: KeyOutcome("absent") for key in todo if key not in present})
    existing = [k for k in todo if k in present]
    held: dict[str, Quarantined] = {}
    if quarantine_days > 0 and targets:
        held, refused, missing = move_into_quarantine(
            s3, bucket, [(k, targets[k], present[k]) for k in existing if k in targets], quarantine_days
        )
        outcomes.update(
            {k: KeyOutcome("failed", error=why, permanent=permanent) for k, (why, permanent) in refused.items()}
        )
        outcomes.update({k: KeyOutcome("absent") for k in missing})
        # written again during the copies: not deleted now (its copy is of older bytes; the next drain copies again)
        changed = changed_since_copied(s3, bucket, held)
        outcomes.update({k: KeyOutcome("failed", error=why) for k, why in changed.items()})
        drop_copies(s3, bucket, [held.pop(k) for k in changed], states[bucket])
        existing = [k for k in existing if k in held]
        # an object not there may be in quarantine already: moved by a drain that failed before it recorded so
        gone = [k for k in todo if outcomes.get(k, KeyOutcome("")).outcome == "absent" and k in targets]
        for key, moved in held_copies(conn, s3, bucket, {k: targets[k] for k in gone}, quarantine_days).items():
            outcomes[key] = KeyOutcome("deleted", size=moved.copy.size, held=moved)
    try:
        outcome = delete_objects_in_batches(
            s3,
            bucket,
            existing,
            batch_size=min(batch_size, MAX_KEYS_PER_CALL),
            concurrency=concurrency,
            versioned=states[bucket].keeps_versions,
        )
    except (ClientError, BotoCoreError):
        drop_copies(s3, bucket, list(held.values()), states[bucket])  # the keys stay owed: no copy is left unrecorded
        raise
    drop_copies(s3, bucket, [held[k] for k in existing if k in outcome.failed and k in held], states[bucket])
    for key in existing:
        if key in outcome.failed:
            outcomes[key] = KeyOutcome("failed", error=outcome.failed[key], permanent=key in outcome.permanent)
        else:
            size = present[key] if present[key] is not None else (held[key].copy.size if key in held else None)
            outcomes[key] = KeyOutcome("deleted", size=size, marker=outcome.markers.get(key), held=held.get(key))
    return outcomes


def drop_copies(s3: ObjectStore, bucket: str, copies: list[Quarantined], state: BucketState) -> None:
    """Delete quarantine copies whose originals stay owed (not deleted now): none is left that blobgc does not
    record. Best effort: one that cannot be deleted is logged, and copied over by the next drain of its key."""
    if not copies:
        return
    try:
        failed = delete_copies(s3, bucket, [c.copy.key for c in copies], versioned=state.keeps_versions)
    except (ClientError, BotoCoreError) as error:
        failed = {c.copy.key: error_code(error) for c in copies}
    if failed:
        log.warning(
            "%d quarantine copies in %s of objects that stay owed could not be removed (the next drain of their "
            "keys copies over them): %s",
            len(failed),
            bucket,
            next(iter(failed.values())),
        )


def settle_batches(
    conn: psycopg.Connection,
    s3: ObjectStore,
    run: RunRef,
    rows: list[tuple[Any, ...]],
    batch_size: int,
    concurrency: int,
    policy: DrainPolicy = DEFAULT_POLICY,
    down: dict[str, BaseException] | None = None,
    default_bucket: str = DEFAULT_BUCKET,
    quarantine: QuarantinePolicy = NO_QUARANTINE,
    states: dict[str, BucketState] | None = None,
    listed: Mapping[str, Listed] | None = None,
    deleted: Callable[[str, list[str]], None] | None = None,
) -> DrainResult:
    """Delete the claimed rows' keys (per bucket and source, in a fixed order) and settle each row.

    `listed` holds what was listed ahead of the claim (`ListedAhead`), per bucket: the keys of unknown size it
    answers for are not asked again. `deleted` is told each bucket's keys deleted (`ListedAhead.deleted`).

    A source's key guard first sets aside the keys a row needs again (settled as kept) and holds the
    others until this transaction ends. A whole call that fails (the bucket is gone, S3 is down)
    fails only its bucket's keys: the other groups go on.
    """
    by_group: dict[tuple[str, str], list[str]] = defaultdict(list)
    sizes_logged: dict[tuple[str, str], int | None] = {}
    not_after: dict[tuple[str, str], datetime] = {}
    owners: dict[tuple[str, str], str] = {}  # (bucket, key) -> the run that owed it (its quarantine key's run)
    for _log_id, bucket, source, keys, sizes, _failures, modified_before, owner_run in rows:
        by_group[(bucket, source)].extend(keys)
        sizes_logged.update({(bucket, k): s for k, s in zip(keys, sizes, strict=True)})
        if modified_before is not None:
            not_after.update({(bucket, k): modified_before for k in keys})
        for k in keys:
            owners.setdefault((bucket, k), owner_run)
    outcomes: dict[tuple[str, str], KeyOutcome] = {}
    states = {} if states is None else states
    settled = DrainResult()
    down = {} if down is None else down
    with ExitStack() as guards:
        # guards take their locks in one order (source, then bucket), so two drains never deadlock on them
        for (bucket, source), keys in sorted(by_group.items(), key=lambda item: (item[0][1], item[0][0])):
            try:
                if bucket in down:
                    raise down[bucket]
                days = quarantine.days(source, bucket)
                group = delete_group(
                    conn,
                    s3,
                    guards,
                    bucket,
                    source,
                    keys,
                    batch_size,
                    concurrency,
                    states,
                    {k: sizes_logged.get((bucket, k)) for k in keys},
                    {k: not_after[(bucket, k)] for k in keys if (bucket, k) in not_after},
                    default_bucket=default_bucket,
                    quarantine_days=days,
                    targets={k: quarantine_key(run.dag_id, owners[(bucket, k)], k) for k in keys} if days > 0 else None,
                    listed=(listed or {}).get(bucket),
                )
            except (ClientError, BotoCoreError) as error:
                transient = is_transient(error)
                message = f"{error_code(error)}: {error}"[:500]
                log.warning(
                    "%s %d owed keys of %s in %s: %s",
                    "could not delete (will retry)" if transient else "refused:",
                    len(keys),
                    source,
                    bucket,
                    message,
                )
                if transient and bucket not in down:
                    settled.errors.append(error)
                    down[bucket] = error
                if not transient:
                    settled.refused.setdefault(bucket, (source, error))
                group = {k: KeyOutcome("failed", error=message, permanent=not transient) for k in keys}
            except (QuarantineUnknown, StoreUnknown) as unknown:
                log.warning("%d owed keys of %s in %s stay owed: %s", len(keys), source, bucket, unknown)
                group = {k: KeyOutcome("failed", error=str(unknown)[:500]) for k in keys}
            outcomes.update({(bucket, k): o for k, o in group.items()})
            if deleted is not None:
                deleted(bucket, [k for k, o in group.items() if o.outcome == "deleted"])
    # versioned buckets: bucket -> (keys deleted, their bytes, the delete markers they left)
    noncurrent: dict[str, tuple[list[str], int, int]] = {}
    for log_id, bucket, source, keys, sizes, failures, _modified_before, owner_run in rows:
        results = [outcomes[(bucket, k)] for k in keys]
        failed = [(k, sz, o) for k, sz, o in zip(keys, sizes, results, strict=True) if o.outcome == "failed"]
        done = [(k, o) for k, o in zip(keys, results, strict=True) if o.outcome == "deleted"]
        permanent = any(o.permanent for _, _, o in failed)
        park_now = any(o.park_now for _, _, o in failed)
        failures_now = failures + 1 if permanent else (failures if failed else 0)
        conn.execute(
            queries.load("outbox/settle_owed_deletions"),
            {
                "log_id": log_id,
                "run_id": run.run_id,
                "failed_keys": [k for k, _, _ in failed],
                "failed_sizes": [sz for _, sz, _ in failed],
                "errors": json.dumps({k: o.error for k, _, o in failed}) if failed else None,
                "failures": failures_now,
                "backoff": policy.backoff(failures_now) if permanent else timedelta(0),
                "park": park_now or (permanent and failures_now >= policy.park_after),
                "done_keys": [k for k, _ in done],
                "done_sizes": [o.size for _, o in done],
                "done_versions": [o.marker for _, o in done]
                if bucket in states and states[bucket].keeps_versions
                else None,
                "kept_keys": [k for k, o in zip(keys, results, strict=True) if o.outcome == "kept"],
                "absent_keys": [k for k, o in zip(keys, results, strict=True) if o.outcome == "absent"],
            },
        )
        moved = [o.held for _, o in done if o.held is not None]
        record_quarantined(conn, run, log_id=log_id, owner_run_id=owner_run, source=source, bucket=bucket, held=moved)
        keeps = bucket in states and states[bucket].keeps_versions
        deleted_bytes = sum(o.size or 0 for _, o in done)
        # bytes are reclaimed only when they leave storage: not while a copy waits in quarantine (counted when it is
        # purged), nor where a versioned bucket keeps them as a noncurrent version
        reclaimed = 0 if keeps else sum(o.size or 0 for _, o in done if o.held is None)
        if keeps and done:
            known_keys, known_bytes, markers = noncurrent.get(bucket, ([], 0, 0))
            noncurrent[bucket] = (
                known_keys + [k for k, _ in done],
                known_bytes + deleted_bytes,
                markers + sum(o.marker is not None for _, o in done),
            )
        settled.objects_deleted += len(done)
        settled.bytes_deleted += deleted_bytes
        settled.bytes_reclaimed += reclaimed
        settled.quarantined += len(moved)
        settled.noncurrent += len(done) if keeps else 0
        if done and (collection := collection_of_source(source)) is not None:
            objects, reclaimed_so_far, deleted_so_far = settled.by_collection.get(collection, (0, 0, 0))
            settled.by_collection[collection] = (
                objects + len(done),
                reclaimed_so_far + reclaimed,
                deleted_so_far + deleted_bytes,
            )
        settled.failed += len(failed)
        settled.absent += sum(o.outcome == "absent" for o in results)
    for bucket, (deleted_keys, deleted_bytes, markers) in noncurrent.items():
        state = states[bucket]
        record_bucket(
            conn, run, bucket, state, keys=deleted_keys, bytes_noncurrent=deleted_bytes, delete_markers=markers
        )
        if any(state.noncurrent_days(k) is None for k in deleted_keys):
            settled.keeps_every_version.append(bucket)
    kept = sum(o.outcome == "kept" for o in outcomes.values())
    if kept:
        log.info("kept %d owed objects that rows need again", kept)
    return settled


def main(argv: list[str] | None = None) -> int:
    """`python -m blobgc.core.outbox unpark <dag_id> [log_id ...]`: put parked owed deletions back in line
    (BLOBGC_PG_DSN)."""
    import argparse
    import os

    from blobgc.core.clients import pg_connect

    parser = argparse.ArgumentParser(prog="python -m blobgc.core.outbox", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    unpark = sub.add_parser("unpark", help="unpark a DAG's parked owed deletions (all, or the given log rows)")
    unpark.add_argument("dag_id")
    unpark.add_argument("log_ids", nargs="*", type=int)
    args = parser.parse_args(argv)
    dsn = os.environ.get("BLOBGC_PG_DSN")
    if not dsn:
        parser.error("BLOBGC_PG_DSN is not set (source .blobgc/env, or export the application database's URI)")
    with pg_connect(dsn) as conn:
        n = unpark_owed_deletions(conn, args.dag_id, args.log_ids or None)
    print(f"unparked {n} owed log rows of {args.dag_id}; its next delete_owed_objects task tries them again")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
