"""Reconcile a shard by listing it, page by page in constant memory, after its checkpoint:

1. list one page (up to 1000 keys) after the shard's checkpoint (the next page is fetched meanwhile);
2. ask the database, one query per page, which of the page's keys a row accounts for (`checks.judge_keys`);
3. the keys no row accounts for and whose `LastModified` is older than the cutoff are orphans: those found
   orphaned on `confirmations` real runs in a row (`sightings`) are planned, and owed after the gate (deleted by
   the drain, under the sources' key guards), the others wait;
4. keys that match no known layout are recorded as findings, never deleted;
5. rows of the page's id range whose objects are not in the listing are recorded as missing objects, never
   "fixed";
6. the checkpoint moves past the page in the same transaction, so a retry resumes there.

A collection's shard (a literal prefix of its key templates) asks the table which of the page's keys some row
forms, exactly (`blobgc.core.collections.accounted_keys`; the keys' readings only narrow the look-up), so a key
of a template's shape that no row forms is an orphan (under the same age floor), and a key under the prefix
that fits no template's shape is reported, never deleted. The inventory path forms the same keys in SQL, so
both sources judge every key alike.

The age floor applies to the deletion, never to the listing: the cutoff is the earlier of the run's reference
time minus `min_age_hours` and the moment the shard's listing started, so an object uploaded after the listing
started can never be an orphan. A row inserted between the listing and the check is seen by the check.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import psycopg

from blobgc.collectors.reconcile import SOURCES_BY_NAME
from blobgc.collectors.reconcile.checks import (
    PAGE,
    Findings,
    advance_checkpoint,
    check_age_floor,
    judge_keys,
    judged_age,
    plan_orphans,
    read_checkpoint,
    report_findings,
)
from blobgc.collectors.reconcile.shards import Shard, ShardResult
from blobgc.collectors.reconcile.sightings import confirm_orphans, start_pass
from blobgc.core import queries
from blobgc.core.collections import BoundCollection, collection_of_source
from blobgc.core.keys import KeySource
from blobgc.core.objects import HIGHEST, ObjectStore, key_before
from blobgc.core.quarantine import in_quarantine
from blobgc.core.refusals import RUN_BUCKET_VARIABLE, collection_origin, naming_bucket
from blobgc.core.runs import RunRef
from blobgc.core.scratch import is_scratch

log = logging.getLogger(__name__)

# S3 lists LastModified to the second: an object written in the second a listing started may show as older
LISTING_MARGIN = timedelta(seconds=2)


def list_pages(
    s3: ObjectStore, bucket: str, shard: Shard, start_after: str, page_size: int = PAGE
) -> Iterator[tuple[list[dict], bool]]:
    """The shard's listing (or its range's), a page at a time, after `start_after`; a listing error propagates.

    The next page is fetched while the caller checks the current one (one page ahead, no more),
    so the database check overlaps the listing. An error fetching a page surfaces when the caller
    asks for that page, after every earlier page was checked.
    """
    kwargs = {"Bucket": bucket, "Prefix": shard.prefix, "MaxKeys": page_size}
    if shard.source is None and shard.collection is None and shard.prefix == "":
        kwargs["Delimiter"] = "/"  # loose keys at the top only; the folders are shards of their own

    def fetch(after: str) -> dict:
        return s3.list_objects_v2(StartAfter=after, **kwargs) if after else s3.list_objects_v2(**kwargs)

    if shard.lo and (not start_after or start_after < shard.lo):
        start_after = key_before(shard.lo)
    with ThreadPoolExecutor(1, thread_name_prefix="list-ahead") as ahead:
        pending = ahead.submit(fetch, start_after)
        while True:
            page = pending.result()
            contents = page.get("Contents") or []
            truncated = bool(page.get("IsTruncated")) and bool(contents)
            if shard.hi and contents and contents[-1]["Key"] >= shard.hi:  # the range ends in this page
                contents = [c for c in contents if c["Key"] < shard.hi]
                truncated = False
            if truncated:
                pending = ahead.submit(fetch, contents[-1]["Key"])
            yield contents, not truncated
            if not truncated:
                return


def pages_naming_bucket(
    s3: ObjectStore, bucket: str, shard: Shard, start_after: str, page_size: int, origin: str
) -> Iterator[tuple[list[dict], bool]]:
    """`list_pages`, a missing bucket (or one that refuses the listing) raised as a refusal naming it and `origin`."""
    with naming_bucket(bucket, origin):
        yield from list_pages(s3, bucket, shard, start_after, page_size)


def id_floor(text: str | None) -> str | None:
    """`text` cut before its first character that sorts at or before "/": every key formed from an id (the id,
    then "/..." or nothing) that sorts after a key whose id part is `text` has an id at or after this."""
    if text is None:
        return None
    for i, char in enumerate(text):
        if char <= "/":
            return text[:i]
    return text


def check_page(
    conn: psycopg.Connection,
    source: KeySource | BoundCollection | None,
    shard: Shard,
    contents: list[dict],
    cutoff: datetime,
    after: str,
    last_page: bool,
    primary: psycopg.Connection | None = None,
) -> Findings:
    """Judge one page's keys (`checks.judge_keys`), and find the rows of a seed layout whose objects should be in
    its stretch of the listing but are not.

    The stretch is (`after`, the page's last key]: from the previous page's last key, or the range's
    first boundary, to the range's end on the last page. It is decided in key order, as S3 lists:
    the rows are fetched by an id interval wide enough for every key of the stretch (`id_floor`),
    and each key they must have is judged by where it sorts. Ids and keys sort alike except around
    characters before "/" ("ab-c" sorts after "ab", "blobs/ab-c/raw" before "blobs/ab/raw").
    """
    found = Findings(considered=len(contents))
    if source is None:
        found.unknown = [(o["Key"], None) for o in contents]
        return found
    items = [(o["Key"], int(o.get("Size") or 0), o["LastModified"]) for o in contents]
    judge_keys(conn, source, items, cutoff, found, primary)
    if isinstance(source, BoundCollection):
        return found
    # the reverse check over the page's stretch of the listing, (first, last]
    first = after or shard.lo
    last = shard.hi if last_page else contents[-1]["Key"]

    def in_stretch(key: str) -> bool:
        above = key > after if after else (not shard.lo or key >= shard.lo)
        below = (not last or key < last) if last_page else key <= last
        return above and below and key.startswith(shard.prefix)

    ref_prefix = source.ref_prefix(shard.prefix)
    hi = id_floor(shard.id_bound(source, last))
    rows = conn.execute(
        queries.load(source.rows_query),
        {
            "shard_lo": ref_prefix,
            "shard_hi": ref_prefix[:-1] + chr(ord(ref_prefix[-1]) + 1) if ref_prefix else HIGHEST,
            "lo": id_floor(shard.id_bound(source, first)),
            "hi": None if hi is None else hi + HIGHEST,
        },
    ).fetchall()
    listed = {item["Key"] for item in contents}
    for ref, known in rows:
        for key in source.required_keys(ref, known):
            if in_stretch(key) and key not in listed:
                found.missing.append((key, source.name))
    return found


def reconcile_shard(
    conn: psycopg.Connection,
    s3: ObjectStore,
    run: RunRef,
    shard: Shard,
    *,
    bucket: str,
    cutoff: datetime,
    confirmations: int,
    page_size: int = PAGE,
    collection: BoundCollection | None = None,
    bucket_origin: str = RUN_BUCKET_VARIABLE,
    read: psycopg.Connection | None = None,
) -> ShardResult:
    """Reconcile one shard from its checkpoint to its end (see the module docstring), planning the orphans found on
    `confirmations` real runs in a row (`sightings`); a collection's shard needs the collection, bound
    (`collection`). A bucket that is missing or refuses the listing fails it at once, named
    with what points at it (the collection, or `bucket_origin` for the run's `bucket`). Each page's keys are looked
    up on `read` (a read replica; by default `conn`), and those it accounts for no row of again on `conn`."""
    source: KeySource | BoundCollection | None
    if shard.collection is not None:
        if collection is None or collection.name != shard.collection:
            raise ValueError(f"shard {shard.name} needs collection {shard.collection} bound")
        source = collection
        bucket = collection.bucket
        bucket_origin = collection_origin(collection.collection)
    else:
        source = SOURCES_BY_NAME.get(shard.source) if shard.source else None
    check_age_floor(run, cutoff)
    # the report counts a shard under its collection (a seed layout's: the collection in column mode on its table)
    scope = shard.collection or (collection_of_source(shard.source) if shard.source else None) or bucket
    age_floor = judged_age(run, cutoff)  # an object this old is judged
    # never judge an object written after this listing started, whatever the floor
    cutoff = min(cutoff, datetime.now(UTC) - LISTING_MARGIN)
    checkpoint = read_checkpoint(conn, run, shard.checkpoint)
    result = ShardResult(shard.name)
    if checkpoint and checkpoint.done:
        log.info("shard %s was already reconciled by this run", shard.name)
        return result
    passes = start_pass(conn, run, confirmations)
    start_after = checkpoint.start_after if checkpoint else ""
    result.resumed_after = start_after
    if start_after:
        log.info("shard %s resumes after %s", shard.name, start_after)
    for contents, last_page in pages_naming_bucket(s3, bucket, shard, start_after, page_size, bucket_origin):
        # deleted objects waiting, a run's scratch files: never judged
        listed = [c for c in contents if not (in_quarantine(c["Key"]) or is_scratch(c["Key"]))]
        page = check_page(conn if read is None else read, source, shard, listed, cutoff, start_after, last_page, conn)
        with conn.transaction():
            confirm_orphans(conn, passes, bucket, page)  # those found on too few real runs in a row wait
            if page.orphans and source is not None:
                plan_orphans(conn, run, source, page.orphans, part=shard.checkpoint, bucket=bucket, cutoff=cutoff)
            report_findings(conn, run, bucket, page)
            advance_checkpoint(
                conn,
                run,
                shard.checkpoint,
                start_after=contents[-1]["Key"] if contents else start_after,
                found=page,
                keys=page.considered,
                done=last_page,
                scope=scope,
                age_floor=age_floor,
            )
        if contents:
            start_after = contents[-1]["Key"]
        result.pages += 1
        result.keys_checked += page.considered
        result.add(page)
    log.info(
        "shard %s: %d keys in %d pages, %d accounted for by rows; %d orphans (%d bytes) %s, %d seen orphaned "
        "on fewer than %d real runs in a row, waiting for confirmation%s, %d too young to judge, %d of unknown "
        "layout, %d rows missing their object",
        shard.name,
        result.keys_checked,
        result.pages,
        result.accounted,
        result.orphans,
        result.orphan_bytes,
        "would go" if run.dry_run else "planned",
        result.waiting,
        confirmations,
        f" (e.g. {', '.join(result.waiting_sample)})" if result.waiting_sample else "",
        result.too_young,
        result.unknown_keys,
        result.missing_objects,
    )
    return result
