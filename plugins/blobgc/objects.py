"""S3 object deletion in DeleteObjects batches, with per-key error handling and backoff."""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

log = logging.getLogger(__name__)

MAX_KEYS_PER_CALL = 1000  # the S3 API limit for DeleteObjects
# Error codes worth another try: throttling and server-side failures.
RETRYABLE_CODES = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling", "ThrottlingException",
     "RequestLimitExceeded", "OperationAborted"}
)
# A key that is already gone is what we wanted: it counts as deleted.
ALREADY_GONE_CODES = frozenset({"NoSuchKey", "NoSuchVersion"})


@dataclass
class DeleteOutcome:
    """Which keys S3 confirmed deleted (or already absent), and which failed, with their last error.

    On a versioned bucket, `markers` holds the version id of the delete marker each deleted key got.
    """

    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    markers: dict[str, str] = field(default_factory=dict)


def chunked(items: Sequence[str] | Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
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


def backoff_delay(attempt: int, base_delay: float, max_delay: float = 20.0) -> float:
    """Exponential backoff with full jitter."""
    return random.uniform(0, min(max_delay, base_delay * (2**attempt)))


def bucket_is_versioned(client, bucket: str) -> bool:
    """Whether deleting from `bucket` leaves a delete marker: versioning Enabled, or Suspended with old versions."""
    return client.get_bucket_versioning(Bucket=bucket).get("Status") in ("Enabled", "Suspended")


def check_batch_size(batch_size: int) -> None:
    """Refuse a batch size S3 would refuse: DeleteObjects takes 1 to 1000 keys."""
    if not 1 <= batch_size <= MAX_KEYS_PER_CALL:
        raise ValueError(f"batch_size must be between 1 and {MAX_KEYS_PER_CALL}, got {batch_size}")


def delete_objects_in_batches(
    client,
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
    failed with a retryable code (SlowDown, 5xx) are sent again with exponential backoff; keys that
    still fail, or fail with another code (AccessDenied), are returned in `failed` for the caller to
    keep owed. A call that raises a non-retryable error (or keeps failing) propagates.
    """
    check_batch_size(batch_size)
    chunks = [list(dict.fromkeys(c)) for c in chunked(keys, batch_size)]  # no duplicate keys in one request

    def one(chunk: list[str]) -> DeleteOutcome:
        return delete_chunk(client, bucket, chunk, max_attempts=max_attempts, base_delay=base_delay, sleep=sleep,
                            versioned=versioned)

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
    if outcome.failed:
        log.warning("%d of %d keys in %s were not deleted; they stay owed",
                    len(outcome.failed), len(outcome.failed) + len(outcome.deleted), bucket)
    return outcome


def delete_chunk(
    client, bucket: str, chunk: list[str], *, max_attempts: int, base_delay: float, sleep: Callable[[float], None],
    versioned: bool = False,
) -> DeleteOutcome:
    """One DeleteObjects call for up to 1000 keys, resending the keys that failed with a retryable code."""
    outcome = DeleteOutcome()
    pending = chunk
    last_error: dict[str, str] = {}
    for attempt in range(max_attempts):
        try:
            outcome.calls += 1
            response = client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in pending], "Quiet": not versioned}
            )
        except ClientError as error:
            if not is_retryable(error) or attempt == max_attempts - 1:
                raise
            delay = backoff_delay(attempt, base_delay)
            log.warning("DeleteObjects on %s failed (%s); retrying %d keys in %.2fs",
                        bucket, error.response.get("Error", {}).get("Code"), len(pending), delay)
            sleep(delay)
            continue
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
        outcome.deleted.extend(k for k in pending if k not in not_deleted)
        pending = retry
        if not pending:
            break
        if attempt < max_attempts - 1:
            sleep(backoff_delay(attempt, base_delay))
    for key in pending:
        outcome.failed[key] = last_error.get(key, "retries exhausted")
    return outcome
