"""The object store, behind one interface, and the operations blobgc builds on it: DeleteObjects in batches with
per-key errors and backoff, existence and sizes, listings and their shards, versioning, verified server-side copies.

`ObjectStore` is every call blobgc makes of a store: thirteen operations of the S3 API, called with S3's keyword
arguments. An S3 client is one (boto3's, or the Amazon provider's `S3Hook.get_conn()`, which the DAGs use), and
so is the Airflow layer's `StoreByBucket`, which sends each call to the client of its bucket's connection. Another
store is another implementation of these thirteen calls, not edits across the collectors: mypy checks that the
core calls nothing else. Google Cloud Storage (`blobgc.core.stores.gcs`) and Azure Blob Storage
(`blobgc.core.stores.azure`) are two: each answers in S3's shapes and error codes, deletes through its own batch
API, and maps S3's versions and delete markers onto its generations or blob versions.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar
from xml.etree import ElementTree

from botocore.exceptions import BotoCoreError, ClientError

from blobgc.core.settings import ConfigurationError

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

    def get_bucket_lifecycle_configuration(self, **kwargs: Any) -> dict[str, Any]: ...

    def copy_object(self, **kwargs: Any) -> dict[str, Any]: ...

    def create_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...

    def upload_part_copy(self, **kwargs: Any) -> dict[str, Any]: ...

    def complete_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...

    def abort_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...


class StoreUnknown(ConfigurationError):
    """The store of a bucket is not known (its collection's connection cannot be read): nothing is asked of any
    store for it; the drain keeps its owed objects owed."""

    def __init__(self, bucket: str, why: str) -> None:
        super().__init__(f"bucket {bucket!r}: its store is unknown, because {why}; its objects are left alone")
        self.bucket = bucket


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
LIST_PAGE = 1000  # the most keys one ListObjectsV2 page holds
# A listing page is worth its call when it settles at least this many of the wanted keys (found, or known absent):
# at list price a LIST costs what 12.5 HEADs do ($0.005 against $0.0004 per 1,000 requests), and on S3 about what 5
# to 10 do in time (50-100 ms a page of 1000, about 15 ms a HEAD). Fewer keys than this are HEADed outright.
LIST_WORTH = 16
LIST_STREAMS = 8  # disjoint key ranges listed side by side
MIN_RANGE = 100  # wanted keys per listed range at least: smaller ranges would overlap pages


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


# the versioning statuses under which a delete leaves a marker, and the object's bytes stored as a noncurrent version
KEEPS_VERSIONS = ("Enabled", "Suspended")


def bucket_is_versioned(client: ObjectStore, bucket: str) -> bool:
    """Whether deleting from `bucket` leaves a delete marker: versioning Enabled, or Suspended with old versions."""
    return versioning_status(client, bucket) in KEEPS_VERSIONS


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
    fast_deletes(listing_client(client, bucket))

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


# botocore validates and serializes a DeleteObjects request of 1000 keys through its model, key by key: about 40 µs of
# client CPU a key, more than the local server takes to delete it. `fast_deletes` gives a botocore client two
# handlers: before the parameters are built, a request of plain keys ({"Key": str} each, nothing else) is handed to
# botocore with one placeholder key in place of its objects, the keys kept in the call's context; once botocore has
# serialized that (the bucket, the headers, the <Delete> document around the placeholder), the placeholder's
# <Object> is replaced with the keys' own, escaped as ElementTree escapes text (&, <, >; botocore's own handler then
# escapes \r and \n over the whole body, as for any DeleteObjects). Byte for byte botocore's own body
# (`test_fast_deletes_send_the_body_botocore_would`). A request with anything else (a VersionId, an ETag) is left to
# botocore whole. If the placeholder is not found exactly once the call fails: it is never sent.
FAST_DELETES_PARAMS, FAST_DELETES_CALL = "before-parameter-build.s3.DeleteObjects", "before-call.s3.DeleteObjects"
FAST_DELETES_SEND = "before-send.s3.DeleteObjects"
DELETE_PLACEHOLDER = "blobgc-fast-deletes-placeholder"
DELETE_KEYS = "blobgc_delete_keys"  # the call's context: the keys the placeholder stands for
PLACEHOLDER_OBJECT = f"<Object><Key>{DELETE_PLACEHOLDER}</Key></Object>".encode()


def fast_deletes(client: Any) -> None:
    """Serialize `client`'s DeleteObjects requests of plain keys with `stand_in_for_keys` and `put_keys_back` (a
    botocore client; others are left as they are). Idempotent."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None and hasattr(events, "register_first"):
        # the handler that puts the keys back first, and a last check before sending: a call that took the
        # placeholder (another thread registering these meanwhile) is never sent with it
        events.register_first(FAST_DELETES_SEND, refuse_placeholder, unique_id="blobgc-fast-deletes-send")
        events.register_first(FAST_DELETES_CALL, put_keys_back, unique_id="blobgc-fast-deletes-call")
        events.register_first(FAST_DELETES_PARAMS, stand_in_for_keys, unique_id="blobgc-fast-deletes-params")


def stand_in_for_keys(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """`before-parameter-build` of DeleteObjects: a request of 2 or more plain keys goes on with a placeholder."""
    delete = params.get("Delete")
    if not isinstance(delete, dict) or not set(delete) <= {"Objects", "Quiet"}:
        return
    objects = delete.get("Objects")
    if not isinstance(objects, list) or len(objects) < 2:
        return
    keys = []
    for item in objects:
        if type(item) is not dict or len(item) != 1 or type(key := item.get("Key")) is not str:
            return
        keys.append(key)
    context[DELETE_KEYS] = keys
    params["Delete"] = {**delete, "Objects": [{"Key": DELETE_PLACEHOLDER}]}  # the caller's dict is left as it was


def put_keys_back(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """`before-call` of DeleteObjects: the placeholder's <Object> replaced with the keys' (see `fast_deletes`)."""
    keys = context.pop(DELETE_KEYS, None)
    if keys is None:
        return
    body = params.get("body")
    if not isinstance(body, bytes) or body.count(PLACEHOLDER_OBJECT) != 1:
        raise RuntimeError(
            "blobgc's DeleteObjects serialization did not find its placeholder in botocore's request body; the "
            "call is not sent (botocore's serialization changed?)"
        )
    objects = "".join(f"<Object><Key>{xml_text(key)}</Key></Object>" for key in keys)
    params["body"] = body.replace(PLACEHOLDER_OBJECT, objects.encode("utf-8", "xmlcharrefreplace"))


def refuse_placeholder(request: Any, **_: Any) -> None:
    """`before-send` of DeleteObjects: a body that still holds the placeholder's <Object> is never sent."""
    body = getattr(request, "body", None)
    if isinstance(body, bytes) and PLACEHOLDER_OBJECT in body:
        raise RuntimeError(
            "a DeleteObjects request still held blobgc's placeholder key after serialization: not sent (its keys "
            "stay owed)"
        )


def xml_text(text: str) -> str:
    """`text` escaped as ElementTree escapes an element's text."""
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    return text


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


# The names of buckets (S3, GCS) and containers (Azure) each scheme of a folder URL takes.
BUCKET_NAMES = {
    "s3": r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]",
    "gs": r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]",
    "az": r"[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]",
}


def folder_url(text: str) -> tuple[str, str, str] | None:
    """(scheme, bucket, prefix) of a folder of any store written as `s3://bucket/prefix`, `gs://bucket/prefix` or
    `az://container/prefix` (prefix "" or ending in "/"); None when `text` is no such URL, or its bucket's name is not
    one its store takes."""
    match = re.fullmatch(r"(s3|gs|az)://([a-z0-9][a-z0-9._-]{1,61}[a-z0-9])(?:/(.*))?", str(text).strip())
    if not match or not re.fullmatch(BUCKET_NAMES[match[1]], match[2]):
        return None
    prefix = (match[3] or "").strip("/")
    return match[1], match[2], f"{prefix}/" if prefix else ""


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
    client: ObjectStore, bucket: str, keys: Iterable[str], *, concurrency: int = 32, streams: int = LIST_STREAMS
) -> dict[str, ObjectStat]:
    """Size and LastModified, as the store reports them now, of each of `keys` that exists (its current version).

    Learnt in bulk where that is cheaper: the keys are sorted and cut into disjoint ranges (up to 1000 keys each,
    at least `streams` ranges where there are enough keys), listed `streams` at a time with ListObjectsV2. Each
    page starts at the next wanted key not yet settled (StartAfter), so the gaps between the wanted keys are
    skipped, not listed, and it settles every wanted key up to its last listed key: found with its size and
    LastModified, or absent. A range whose pages settle fewer than `LIST_WORTH` keys each (sparse keys), and any
    set of fewer keys than that, is asked with HEAD instead, `concurrency` at a time. A listing the credentials
    may not make (AccessDenied: s3:ListBucket not granted) falls back to HEAD, whose AccessDenied propagates.
    Keys not found do not exist now; a versioned bucket's delete markers and noncurrent versions are not found.
    """
    ordered = sorted(set(keys))
    if len(ordered) < LIST_WORTH:
        return head_stats(client, bucket, ordered, concurrency=concurrency) if ordered else {}
    fast_listing(listing_client(client, bucket))
    size = min(LIST_PAGE, max(MIN_RANGE, -(-len(ordered) // max(1, streams))))
    ranges = [ordered[i : i + size] for i in range(0, len(ordered), size)]
    denied = threading.Event()  # the store refused a listing: the other ranges are HEADed at once

    def list_one(wanted: list[str]) -> tuple[dict[str, ObjectStat], list[str]]:
        if denied.is_set():
            return {}, wanted
        try:
            return list_range(client, bucket, wanted)
        except ClientError as error:
            if error_code(error) not in ACCESS_DENIED_CODES:
                raise
            denied.set()
            return {}, wanted

    if len(ranges) > 1 and streams > 1:
        with ThreadPoolExecutor(min(streams, len(ranges))) as pool:
            parts = list(pool.map(list_one, ranges))
    else:
        parts = [list_one(r) for r in ranges]
    found: dict[str, ObjectStat] = {}
    sparse: list[str] = []
    for listed, rest in parts:
        found.update(listed)
        sparse += rest
    if denied.is_set():
        log.info("may not list %s: HEADing %d keys instead", bucket, len(sparse))
    if sparse:
        found.update(head_stats(client, bucket, sparse, concurrency=concurrency))
    return found


ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AllAccessDisabled", "403"})


# ListObjectsV2's <Contents> as botocore parses them cost about 100 ms of client CPU a page of 1000 (its model-driven
# parser, and dateutil for every LastModified), five times what the local server takes to answer. A listing that
# sizes owed keys reads about a thousand objects for each thousand deleted, so `fast_listing` gives a botocore client
# a `before-parse` handler that parses a page's <Contents> itself, with ElementTree (20 ms a page), into what
# botocore gives (Key, ETag and StorageClass as text, Size as int, LastModified the same instant as an aware datetime
# in UTC, where botocore's dateutil says tzutc() or tzlocal() by the machine's zone), and leaves botocore the rest of
# the page. A page with any other element in its objects (Owner, checksums, RestoreStatus) or anything else
# unexpected is left to botocore whole. botocore's own check of a 200 answer (a truncated body, an embedded error)
# runs before it, on the whole body, and turns such a page into an error this handler leaves alone.
FAST_LISTING_EVENT = "before-parse.s3.ListObjectsV2"
FAST_LISTED_FIELDS = frozenset({"Key", "LastModified", "ETag", "Size", "StorageClass"})
CONTENTS_START, CONTENTS_END = b"<Contents>", b"</Contents>"


def fast_listing(client: Any) -> None:
    """Parse `client`'s ListObjectsV2 objects with `parse_listed_objects` (a botocore client; others are left as they
    are). Idempotent."""
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None and hasattr(events, "register_first"):
        events.register_first(FAST_LISTING_EVENT, parse_listed_objects, unique_id="blobgc-fast-listing")


def parse_listed_objects(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    """botocore's `before-parse` handler for ListObjectsV2: the page's <Contents>, parsed into
    `customized_response_dict` and cut out of the body botocore parses (see `fast_listing`)."""
    body = response_dict.get("body")
    if response_dict.get("status_code") != 200 or not isinstance(body, bytes):
        return
    start, end = body.find(CONTENTS_START), body.rfind(CONTENTS_END)
    if start < 0 or end < start:
        return
    end += len(CONTENTS_END)
    try:
        objects = ElementTree.fromstring(b"<c>" + body[start:end] + b"</c>")
    except ElementTree.ParseError:
        return
    contents: list[dict[str, Any]] = []
    for element in objects:
        if element.tag != "Contents" or (element.tail or "").strip():
            return
        item: dict[str, Any] = {}
        for member in element:
            if member.tag not in FAST_LISTED_FIELDS or member.tag in item or len(member):
                return
            item[member.tag] = member.text or ""
        try:
            if "Size" in item:
                item["Size"] = int(item["Size"])
            if "LastModified" in item:
                item["LastModified"] = utc_timestamp(item["LastModified"])
        except ValueError:
            return
        contents.append(item)
    customized_response_dict["Contents"] = contents
    response_dict["body"] = body[:start] + body[end:]


def utc_timestamp(text: str) -> datetime:
    """An ISO 8601 UTC timestamp ("2026-11-28T03:32:20.000Z"), aware, in UTC; ValueError for another form."""
    if not text.endswith("Z"):
        raise ValueError(text)
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)


def listing_client(client: ObjectStore, bucket: str) -> Any:
    """The client that lists `bucket`: a store of several connections (`client_for`) names it."""
    client_for = getattr(client, "client_for", None)
    return client_for(bucket) if callable(client_for) else client


def list_range(client: ObjectStore, bucket: str, wanted: list[str]) -> tuple[dict[str, ObjectStat], list[str]]:
    """List a sorted range of wanted keys, page by page, each page from the next key not yet settled; returns
    (objects found, keys left to HEAD: the rest of a range found sparse). A key up to a page's last listed key, or
    anywhere in the range once the listing ends, that was not listed does not exist now."""
    found: dict[str, ObjectStat] = {}
    keep = set(wanted)  # a page also lists the objects between the wanted keys
    i, after = 0, ""
    listed_per_key = 1.0  # objects listed per wanted key settled, learnt page by page: sizes the next page
    while i < len(wanted):
        left = len(wanted) - i
        max_keys = min(LIST_PAGE, max(LIST_WORTH, int(left * listed_per_key * 1.1) + 1))
        page = client.list_objects_v2(
            Bucket=bucket,
            Prefix=os.path.commonprefix([wanted[i], wanted[-1]]),
            StartAfter=max(after, key_before(wanted[i])),
            MaxKeys=max_keys,
        )
        contents = page.get("Contents") or []
        for item in contents:
            if item["Key"] in keep:
                found[item["Key"]] = ObjectStat(int(item.get("Size") or 0), item["LastModified"])
        if not page.get("IsTruncated"):
            break  # the listing ended: every wanted key not listed is absent
        if not contents:
            return found, wanted[i:]  # a truncated empty page settles nothing: HEAD the rest
        after = contents[-1]["Key"]
        settled_to = bisect.bisect_right(wanted, after, lo=i)
        settled = settled_to - i
        i = settled_to
        listed_per_key = len(contents) / max(settled, 1)
        # a full page at this density would settle fewer keys than a page is worth: HEAD the rest of the range
        if settled * LIST_PAGE < LIST_WORTH * len(contents) or len(wanted) - i < LIST_WORTH:
            return found, wanted[i:]
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


# Server-side copies (the quarantine's, and undo's copy back). S3 copies up to 5 GiB with one CopyObject; larger
# objects only part by part (UploadPartCopy, 10,000 parts at most, each 5 MiB to 5 GiB but the last).
MULTIPART_COPY_THRESHOLD = 5 * 1024**3
DEFAULT_COPY_PART = 512 * 1024**2
MIN_COPY_PART = 5 * 1024**2
MAX_COPY_PART = 5 * 1024**3
MAX_COPY_PARTS = 10_000
COPY_PART_CONCURRENCY = 4
# What a CreateMultipartUpload carries over from the source's HEAD when the metadata is copied (CopyObject does so
# itself): boto3's managed copy leaves these to its caller.
COPIED_HEADERS = ("ContentType", "CacheControl", "ContentDisposition", "ContentEncoding", "ContentLanguage", "Expires")
CHECKSUM_FIELDS = ("ChecksumCRC32", "ChecksumCRC32C", "ChecksumCRC64NVME", "ChecksumSHA1", "ChecksumSHA256")
NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


class CopyNotVerified(RuntimeError):
    """A server-side copy that is not what it copied (size, ETag or checksum differ); nothing was deleted, the copy
    included: the caller decides what to do with it (delete it, or copy again)."""

    def __init__(self, bucket: str, source: str, target: str, why: str) -> None:
        super().__init__(f"copy of s3://{bucket}/{source} to {target} not verified: {why}")
        self.bucket, self.source, self.target, self.why = bucket, source, target, why


class SourceChanged(CopyNotVerified):
    """The source is no longer the object that was to be copied (CopySourceIfMatch failed): nothing was copied."""


@dataclass(frozen=True)
class CopiedObject:
    """A verified copy: its key, size and ETag, the source's ETag, and its parts (0: one CopyObject). ETags are
    unquoted."""

    key: str
    size: int
    etag: str | None
    source_etag: str | None
    parts: int


def unquoted(etag: str | None) -> str:
    return (etag or "").strip('"')


def is_multipart_etag(etag: str) -> bool:
    """Whether an ETag is a multipart upload's (md5 of the parts' md5s, "-" and the number of parts)."""
    return "-" in etag


def etag_is_md5(head: Mapping[str, Any]) -> bool:
    """Whether a HEAD's ETag is the MD5 of the bytes (or of the parts', for a multipart ETag): not with SSE-KMS
    or SSE-C, whose ETags are opaque, nor where another store's adapter has no MD5 to report (`ETagIsMD5: False`:
    a GCS composite object, an Azure blob uploaded in blocks without one)."""
    if head.get("ETagIsMD5") is False:
        return False
    return not str(head.get("ServerSideEncryption", "")).startswith("aws:kms") and not head.get("SSECustomerAlgorithm")


def multipart_etag(part_etags: Sequence[str]) -> str:
    """The ETag S3 gives a multipart upload of parts with these ETags: md5 of their binary MD5s, "-N"."""
    digests = b"".join(bytes.fromhex(unquoted(etag)) for etag in part_etags)
    return f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(part_etags)}"


def copy_part_size(size: int, part_size: int) -> int:
    """`part_size`, grown (to whole MiB) when `size` would need more than 10,000 parts of it."""
    if not MIN_COPY_PART <= part_size <= MAX_COPY_PART:
        raise ValueError(f"part_size must be between {MIN_COPY_PART} and {MAX_COPY_PART} bytes, got {part_size}")
    needed = -(-size // MAX_COPY_PARTS)
    if needed <= part_size:
        return part_size
    grown = -(-needed // 1024**2) * 1024**2
    if grown > MAX_COPY_PART:
        raise ValueError(f"an object of {size} bytes is larger than S3 can copy ({MAX_COPY_PARTS} parts of 5 GiB)")
    return grown


def is_precondition_failed(error: ClientError) -> bool:
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return error_code(error) == "PreconditionFailed" or status == 412


def copy_verified(
    store: ObjectStore,
    bucket: str,
    source_key: str,
    target_key: str,
    *,
    size: int | None = None,
    etag: str | None = None,
    part_size: int = DEFAULT_COPY_PART,
    multipart_threshold: int = MULTIPART_COPY_THRESHOLD,
    metadata_directive: Literal["COPY", "REPLACE"] = "COPY",
    metadata: Mapping[str, str] | None = None,
    concurrency: int = COPY_PART_CONCURRENCY,
) -> CopiedObject:
    """Copy `source_key` to `target_key` in `bucket`, server-side, and verify the copy; nothing is ever deleted.

    The source is HEADed unless both `size` and `etag` are given (a multipart copy that keeps the metadata always
    HEADs it). Every copy request names the source's ETag (CopySourceIfMatch): a source written again meanwhile
    fails the copy with `SourceChanged` instead of copying other bytes. Up to `multipart_threshold` bytes (5 GiB,
    S3's CopyObject limit), one CopyObject; above, as the AWS SDK's managed copy does, a multipart upload of
    UploadPartCopy ranges (`part_size`, grown to stay within 10,000 parts; `concurrency` parts at a time),
    completed, or aborted on any error. With `metadata_directive` "COPY" the
    source's metadata and content headers are carried over (a multipart copy sets them from the source's HEAD);
    "REPLACE" sets `metadata` instead. Tags are copied by CopyObject only.

    Verification HEADs the copy: its size must be the source's. After one CopyObject, its ETag must be the source's
    (S3 keeps the MD5 ETag of a plain copy), except where the source's ETag is no MD5 of its bytes (a multipart
    ETag "-N", SSE-KMS, SSE-C): then both objects' checksums (ChecksumSHA256, CRC32, ...) are compared when both
    HEADs report one of the same kind, and otherwise the size alone is. After a multipart copy, its ETag must be
    the one CompleteMultipartUpload returned, which must be the multipart ETag of the parts' ETags (md5 of their
    binary MD5s, "-N"; not checked under SSE-KMS or SSE-C). A copy that fails raises `CopyNotVerified` and is left in
    place: deleting it (or copying again) is the caller's choice.
    """
    if multipart_threshold > MULTIPART_COPY_THRESHOLD:
        raise ValueError(f"multipart_threshold must be at most {MULTIPART_COPY_THRESHOLD} bytes (CopyObject's limit)")
    # a store whose one copy call copies more than S3's CopyObject (GCS's rewrite, Azure's copy) says so
    multipart_threshold = max(multipart_threshold, int(getattr(store, "single_copy_limit", 0)))
    source_head: dict[str, Any] | None = None
    if size is None or etag is None:
        source_head = store.head_object(Bucket=bucket, Key=source_key, ChecksumMode="ENABLED")
        size, etag = int(source_head["ContentLength"]), unquoted(source_head.get("ETag"))
    etag = unquoted(etag)
    copy_source = {"Bucket": bucket, "Key": source_key}
    if size <= multipart_threshold:
        directive: dict[str, Any] = {"MetadataDirective": metadata_directive}
        if metadata_directive == "REPLACE":
            directive["Metadata"] = dict(metadata or {})
        try:
            store.copy_object(
                Bucket=bucket, Key=target_key, CopySource=copy_source, CopySourceIfMatch=f'"{etag}"', **directive
            )
        except ClientError as error:
            if is_precondition_failed(error):
                raise SourceChanged(bucket, source_key, target_key, f"its ETag is no longer {etag}") from error
            raise
        copy_head = store.head_object(Bucket=bucket, Key=target_key, ChecksumMode="ENABLED")
        verify_single_copy(bucket, source_key, target_key, size, etag, source_head, copy_head)
        return CopiedObject(target_key, size, unquoted(copy_head.get("ETag")), etag, 0)
    if metadata_directive == "COPY" and source_head is None:
        source_head = store.head_object(Bucket=bucket, Key=source_key)
    part = copy_part_size(size, part_size)
    headers = multipart_headers(source_head, metadata_directive, metadata)
    expected = multipart_copy(store, bucket, source_key, target_key, size, etag, part, headers, concurrency)
    copy_head = store.head_object(Bucket=bucket, Key=target_key)
    copied_etag = unquoted(copy_head.get("ETag"))
    why = []
    if int(copy_head["ContentLength"]) != size:
        why.append(f"its size is {copy_head['ContentLength']}, the source's {size}")
    if copied_etag != expected.completed:
        why.append(f"its ETag is {copied_etag}, CompleteMultipartUpload answered {expected.completed}")
    if etag_is_md5(copy_head) and expected.completed != expected.computed:
        why.append(f"the upload's ETag {expected.completed} is not its parts' ({expected.computed})")
    if why:
        raise CopyNotVerified(bucket, source_key, target_key, "; ".join(why))
    return CopiedObject(target_key, size, copied_etag, etag, expected.parts)


def verify_single_copy(
    bucket: str,
    source_key: str,
    target_key: str,
    size: int,
    etag: str,
    source_head: Mapping[str, Any] | None,
    copy_head: Mapping[str, Any],
) -> None:
    """Raise CopyNotVerified unless one CopyObject's copy has the source's size and ETag (or checksum: see
    `copy_verified`)."""
    copied_size, copied_etag = int(copy_head["ContentLength"]), unquoted(copy_head.get("ETag"))
    if copied_size != size:
        raise CopyNotVerified(bucket, source_key, target_key, f"its size is {copied_size}, the source's {size}")
    md5s = not is_multipart_etag(etag) and etag_is_md5(copy_head) and etag_is_md5(source_head or {})
    if md5s:
        if copied_etag != etag:
            raise CopyNotVerified(bucket, source_key, target_key, f"its ETag is {copied_etag}, the source's {etag}")
        return
    if source_head is None or source_head.get("ChecksumType") != copy_head.get("ChecksumType"):
        return  # no checksums of the same kind to compare: the size alone is verified
    for name in CHECKSUM_FIELDS:
        if source_head.get(name) and copy_head.get(name) and source_head[name] != copy_head[name]:
            raise CopyNotVerified(
                bucket, source_key, target_key, f"its {name} is {copy_head[name]}, the source's {source_head[name]}"
            )


def multipart_headers(
    source_head: Mapping[str, Any] | None, directive: Literal["COPY", "REPLACE"], metadata: Mapping[str, str] | None
) -> dict[str, Any]:
    """The CreateMultipartUpload arguments that give a multipart copy the source's metadata, or `metadata`."""
    if directive == "REPLACE":
        return {"Metadata": dict(metadata or {})}
    head = source_head or {}
    carried = {name: head[name] for name in COPIED_HEADERS if head.get(name)}
    return {**carried, "Metadata": dict(head.get("Metadata") or {})}


@dataclass(frozen=True)
class MultipartCopy:
    """A completed multipart copy: the ETag CompleteMultipartUpload returned, the one its parts make, its parts."""

    completed: str
    computed: str
    parts: int


def multipart_copy(
    store: ObjectStore,
    bucket: str,
    source_key: str,
    target_key: str,
    size: int,
    etag: str,
    part_size: int,
    headers: Mapping[str, Any],
    concurrency: int,
) -> MultipartCopy:
    """CreateMultipartUpload, one UploadPartCopy per range (each with CopySourceIfMatch), CompleteMultipartUpload;
    the upload is aborted on any error, which then propagates (a changed source as SourceChanged)."""
    upload_id = store.create_multipart_upload(Bucket=bucket, Key=target_key, **headers)["UploadId"]
    ranges = [(n + 1, start, min(start + part_size, size) - 1) for n, start in enumerate(range(0, size, part_size))]
    failed = threading.Event()  # once a part failed, the parts not started yet are not copied

    def copy_part(numbered: tuple[int, int, int]) -> dict[str, Any]:
        number, first, last = numbered
        if failed.is_set():
            raise RuntimeError(f"part {number} not copied: an earlier part failed")
        try:
            answer = store.upload_part_copy(
                Bucket=bucket,
                Key=target_key,
                UploadId=upload_id,
                PartNumber=number,
                CopySource={"Bucket": bucket, "Key": source_key},
                CopySourceRange=f"bytes={first}-{last}",
                CopySourceIfMatch=f'"{etag}"',
            )
        except BaseException:
            failed.set()
            raise
        return {"PartNumber": number, "ETag": answer["CopyPartResult"]["ETag"]}

    try:
        with ThreadPoolExecutor(max(1, min(concurrency, len(ranges)))) as pool:
            # parts start in order and those after a failure are skipped, so the error raised here is a real one;
            # the parts under way finish (the pool waits for them) before the upload is aborted
            parts = [future.result() for future in [pool.submit(copy_part, numbered) for numbered in ranges]]
        done = store.complete_multipart_upload(
            Bucket=bucket, Key=target_key, UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
    except BaseException as error:
        abort_upload(store, bucket, target_key, upload_id)
        if isinstance(error, ClientError) and is_precondition_failed(error):
            raise SourceChanged(bucket, source_key, target_key, f"its ETag is no longer {etag}") from error
        raise
    return MultipartCopy(unquoted(done.get("ETag")), multipart_etag([p["ETag"] for p in parts]), len(parts))


def abort_upload(store: ObjectStore, bucket: str, key: str, upload_id: str) -> None:
    """Abort a multipart upload (its parts stop being stored); a failure to abort is logged, not raised."""
    try:
        store.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    except (ClientError, BotoCoreError) as error:
        log.warning("could not abort the multipart upload %s of s3://%s/%s: %s", upload_id, bucket, key, error)
