"""The object store, behind one interface, and the operations blobgc builds on it: DeleteObjects in batches with
per-key errors and backoff, existence and sizes, listings and their shards, versioning.

`ObjectStore` is every call blobgc makes of a store: seven operations of the S3 API, called with S3's keyword
arguments. An S3 client is one (boto3's, or the Amazon provider's `S3Hook.get_conn()`, which the DAGs use), and
so is the Airflow layer's `S3ByBucket`, which sends each call to the client of its bucket's connection. Another
store is another implementation of these seven calls, not edits across the collectors: mypy checks that the
core calls nothing else.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

log = logging.getLogger(__name__)

Item = TypeVar("Item")


class Paginator(Protocol):
    def paginate(self, **kwargs: Any) -> Iterable[dict[str, Any]]: ...


class ObjectStore(Protocol):
    """The object store as blobgc calls it (see the module docstring); each call returns S3's response shape."""

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_paginator(self, operation_name: str) -> Paginator: ...  # list_objects_v2, list_object_versions

    def head_object(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_object(self, **kwargs: Any) -> dict[str, Any]: ...

    def put_object(self, **kwargs: Any) -> dict[str, Any]: ...

    def delete_objects(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_bucket_versioning(self, **kwargs: Any) -> dict[str, Any]: ...


MAX_KEYS_PER_CALL = 1000  # the S3 API limit for DeleteObjects
# Error codes worth another try: throttling and server-side failures.
RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "OperationAborted",
    }
)
# A key that is already gone is what we wanted: it counts as deleted.
ALREADY_GONE_CODES = frozenset({"NoSuchKey", "NoSuchVersion"})
HIGHEST = "\U0010ffff"  # sorts after every character of a real key
LIST_PAGE = 1000
PROBE_PAGE = 100  # the first listing page of a run of keys: enough to tell dense keys from sparse ones
# Keys are sparse when fewer than 1 in SPARSE_RATIO listed keys is wanted: a listing page costs about what 3 to 8
# HEADs do (S3: ~150 ms a page of 1000 against ~15 ms a HEAD, 32 at a time; the local server: 350 ms against 2.6 ms).
SPARSE_RATIO = 5


@dataclass
class DeleteOutcome:
    """Which keys S3 confirmed deleted (or already absent), and which failed, with their last error.

    On a versioned bucket, `markers` holds the version id of the delete marker each deleted key got.
    """

    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    markers: dict[str, str] = field(default_factory=dict)
    permanent: set[str] = field(default_factory=set)  # failed keys whose error no retry can fix (AccessDenied)


def chunked(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """`items` in lists of `size` (the last one shorter)."""
    batch: list[Item] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def is_retryable(error: ClientError) -> bool:
    code = error.response.get("Error", {}).get("Code", "")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return code in RETRYABLE_CODES or status >= 500


def is_transient(error: BaseException) -> bool:
    """An S3 failure that a later attempt may not meet: throttling, 5xx, a connection or timeout error.

    Anything else (NoSuchBucket, AccessDenied, an invalid request) comes back until someone changes
    the bucket or its policy.
    """
    if isinstance(error, ClientError):
        return is_retryable(error)
    return isinstance(error, (BotoCoreError, OSError))


def error_code(error: BaseException) -> str:
    if isinstance(error, ClientError):
        return error.response.get("Error", {}).get("Code", "") or type(error).__name__
    return type(error).__name__


def backoff_delay(attempt: int, base_delay: float, max_delay: float = 20.0) -> float:
    """Exponential backoff with full jitter."""
    return random.uniform(0, min(max_delay, base_delay * (2**attempt)))


def versioning_status(client: ObjectStore, bucket: str) -> str:
    """The bucket's versioning: "Enabled", "Suspended", or "" when it was never enabled."""
    return client.get_bucket_versioning(Bucket=bucket).get("Status") or ""


def bucket_is_versioned(client: ObjectStore, bucket: str) -> bool:
    """Whether deleting from `bucket` leaves a delete marker: versioning Enabled, or Suspended with old versions."""
    return versioning_status(client, bucket) in ("Enabled", "Suspended")


def check_batch_size(batch_size: int) -> None:
    """Refuse a batch size S3 would refuse: DeleteObjects takes 1 to 1000 keys."""
    if not 1 <= batch_size <= MAX_KEYS_PER_CALL:
        raise ValueError(f"batch_size must be between 1 and {MAX_KEYS_PER_CALL}, got {batch_size}")


def delete_objects_in_batches(
    client: ObjectStore,
    bucket: str,
    keys: Iterable[str],
    *,
    batch_size: int = MAX_KEYS_PER_CALL,
    concurrency: int = 1,
    max_attempts: int = 5,
    base_delay: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
    versioned: bool = False,
) -> DeleteOutcome:
    """Delete `keys` with one DeleteObjects call per up to 1000 keys, `concurrency` calls at a time.

    Quiet mode (errors only) unless `versioned`: then S3 lists each deleted key with the version id
    of its delete marker, which the outcome keeps for the deletion log (blobgc_restore undoes it).

    DeleteObjects answers 200 even when keys fail: every entry of `Errors[]` is examined. Keys that
    failed with a retryable code (SlowDown, 5xx) are sent again with exponential backoff (botocore
    never sees these: the call itself succeeded); keys that still fail, or fail with another code
    (AccessDenied), are returned in `failed` for the caller to keep owed. A call that fails as a whole
    is retried by botocore alone, under the client's retry policy, and then propagates: one retry
    policy per kind of failure, never one on top of the other.
    """
    check_batch_size(batch_size)
    chunks = [list(dict.fromkeys(c)) for c in chunked(keys, batch_size)]  # no duplicate keys in one request

    def one(chunk: list[str]) -> DeleteOutcome:
        return delete_chunk(
            client, bucket, chunk, max_attempts=max_attempts, base_delay=base_delay, sleep=sleep, versioned=versioned
        )

    if concurrency > 1 and len(chunks) > 1:
        with ThreadPoolExecutor(min(concurrency, len(chunks))) as pool:
            parts = list(pool.map(one, chunks))
    else:
        parts = [one(chunk) for chunk in chunks]
    outcome = DeleteOutcome()
    for part in parts:
        outcome.deleted.extend(part.deleted)
        outcome.failed.update(part.failed)
        outcome.calls += part.calls
        outcome.markers.update(part.markers)
        outcome.permanent.update(part.permanent)
    if outcome.failed:
        log.warning(
            "%d of %d keys in %s were not deleted; they stay owed",
            len(outcome.failed),
            len(outcome.failed) + len(outcome.deleted),
            bucket,
        )
    return outcome


def delete_chunk(
    client: ObjectStore,
    bucket: str,
    chunk: list[str],
    *,
    max_attempts: int,
    base_delay: float,
    sleep: Callable[[float], None],
    versioned: bool = False,
) -> DeleteOutcome:
    """One DeleteObjects call for up to 1000 keys, resending the keys that failed with a retryable code."""
    outcome = DeleteOutcome()
    pending = chunk
    last_error: dict[str, str] = {}
    for attempt in range(max_attempts):
        outcome.calls += 1
        # a failed call (5xx, throttling, a dropped connection) was already retried by botocore, under the
        # client's one retry policy (its connection's config_kwargs); it propagates, the keys stay owed
        response = client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in pending], "Quiet": not versioned}
        )
        for done in response.get("Deleted", []) if versioned else ():
            if done.get("DeleteMarkerVersionId"):
                outcome.markers[done["Key"]] = done["DeleteMarkerVersionId"]
        retry: list[str] = []
        not_deleted: set[str] = set()
        for err in response.get("Errors", []):
            key, code = err.get("Key", ""), err.get("Code", "")
            if code in ALREADY_GONE_CODES:
                continue
            not_deleted.add(key)
            last_error[key] = f"{code}: {err.get('Message', '')}".strip()
            if code in RETRYABLE_CODES:
                retry.append(key)
            else:
                outcome.failed[key] = last_error[key]
                outcome.permanent.add(key)
        outcome.deleted.extend(k for k in pending if k not in not_deleted)
        pending = retry
        if not pending:
            break
        if attempt < max_attempts - 1:
            sleep(backoff_delay(attempt, base_delay))
    for key in pending:
        outcome.failed[key] = last_error.get(key, "retries exhausted")
    return outcome


def first_key(client: ObjectStore, bucket: str, prefix: str, start_after: str) -> str | None:
    """The first key under `prefix` after `start_after`, or None: one listing call of one key."""
    page = client.list_objects_v2(Bucket=bucket, Prefix=prefix, StartAfter=start_after, MaxKeys=1)
    contents = page.get("Contents") or []
    return contents[0]["Key"] if contents else None


def leading_shards(client: ObjectStore, bucket: str, prefix: str, chars: int = 1) -> list[str]:
    """The distinct `prefix` + `chars` characters that the bucket's keys under `prefix` start with, in
    order: one listing call per shard found, skipping each shard whole."""
    found, after = [], prefix
    while (key := first_key(client, bucket, prefix, after)) is not None:
        shard = key[: len(prefix) + chars]
        found.append(shard)
        after = shard + HIGHEST
    return found


def listing(client: ObjectStore, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    """Every object under a prefix, in key order."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def key_before(key: str) -> str:
    """A StartAfter value that lists `key` itself and nothing of interest before it."""
    if not key:
        return ""
    last = ord(key[-1])
    return key[:-1] + chr(last - 1) + HIGHEST if last > 0 else key[:-1]


@dataclass(frozen=True)
class ObjectStat:
    """An object as the store reports it now: its size and LastModified."""

    size: int
    modified: datetime


def object_sizes(client: ObjectStore, bucket: str, keys: Iterable[str], *, concurrency: int = 32) -> dict[str, int]:
    """The size, as the store reports it, of each of `keys` that exists now (its current version)."""
    return {key: stat.size for key, stat in object_stats(client, bucket, keys, concurrency=concurrency).items()}


def object_stats(
    client: ObjectStore, bucket: str, keys: Iterable[str], *, concurrency: int = 32
) -> dict[str, ObjectStat]:
    """Size and LastModified, as the store reports them now, of each of `keys` that exists (its current version).

    The keys are sorted and cut into runs of about 1000. Each run is probed with one small ListObjectsV2
    page from its first key: where the keys are dense (most of what the store lists between them is
    wanted), the run is listed on, a page of 1000 keys a call; where they are sparse, each of them is
    asked with HEAD, `concurrency` at a time. Keys not found do not exist now.
    """
    ordered = sorted(set(keys))
    runs = [ordered[i : i + LIST_PAGE] for i in range(0, len(ordered), LIST_PAGE)]
    found: dict[str, ObjectStat] = {}
    sparse: list[str] = []
    for run in runs:
        listed, rest = list_dense_run(client, bucket, run)
        found.update(listed)
        sparse += rest
    if sparse:
        found.update(head_stats(client, bucket, sparse, concurrency=concurrency))
    return found


def list_dense_run(client: ObjectStore, bucket: str, run: list[str]) -> tuple[dict[str, ObjectStat], list[str]]:
    """List a sorted run of keys while the listing is mostly made of them; returns (objects found, keys left to
    HEAD)."""
    found: dict[str, ObjectStat] = {}
    wanted = set(run)
    i, page_size = 0, PROBE_PAGE
    while i < len(run):
        prefix = os.path.commonprefix([run[i], run[-1]])
        page = client.list_objects_v2(Bucket=bucket, Prefix=prefix, StartAfter=key_before(run[i]), MaxKeys=page_size)
        contents = page.get("Contents") or []
        hits = 0
        for item in contents:
            if item["Key"] in wanted:
                found[item["Key"]] = ObjectStat(int(item.get("Size") or 0), item["LastModified"])
                hits += 1
        if not page.get("IsTruncated") or not contents:
            return found, []
        i = bisect.bisect_right(run, contents[-1]["Key"], lo=i)
        if hits * SPARSE_RATIO < len(contents):  # sparse: HEAD is cheaper than listing the keys in between
            return found, run[i:]
        page_size = LIST_PAGE
    return found, []


def head_stats(
    client: ObjectStore, bucket: str, keys: Sequence[str], *, concurrency: int = 32
) -> dict[str, ObjectStat]:
    """HEAD each key: the size and LastModified of those that exist now."""

    def head(key: str) -> tuple[str, ObjectStat | None]:
        try:
            answer = client.head_object(Bucket=bucket, Key=key)
            return key, ObjectStat(int(answer["ContentLength"]), answer["LastModified"])
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return key, None
            raise

    with ThreadPoolExecutor(max(1, min(concurrency, len(keys)))) as pool:
        return {key: stat for key, stat in pool.map(head, keys) if stat is not None}
