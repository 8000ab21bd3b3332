"""Seed 001 §5, "cleaning after the cleaning": the bucket against the database, shard by shard, listing first.

Each key source describes itself (`KEY_SOURCES`): its prefix, how a key maps to the row that
accounts for it, and how it shards. Shards are discovered by walking the bucket, never listed
from a fixed table, and each is reconciled page by page in constant memory:

1. list one page (up to 1000 keys) after the shard's checkpoint;
2. ask the database, one query per page, which of the page's keys a row accounts for;
3. the keys no row accounts for and whose `LastModified` is older than the cutoff are orphans:
   logged and owed in the outbox (deleted by the drain, under the sources' key guards);
4. keys that match no known layout are recorded as findings, never deleted;
5. rows of the page's id range whose objects are not in the listing are recorded as missing
   objects, never "fixed";
6. the checkpoint moves past the page in the same transaction, so a retry resumes there.

A collection of the collections file (docs/reference.md §6) other than app_blob (which is seed 000's source
above) is one shard per literal prefix of its key templates, in its own bucket: one query per page
asks the table which of the page's keys some row forms, exactly
(`blobgc.core.collections.accounted_keys`; the keys' readings only narrow the look-up), so a key of
a template's shape that no row forms is an orphan (under the same age floor), and a key under the
prefix that fits no template's shape is reported, never deleted. The inventory path forms the same
keys in SQL, so both sources judge every key alike.

The age floor applies to the deletion, never to the listing: the cutoff is the earlier of the
run's reference time minus `min_age_hours` and the moment the shard's listing started, so an
object uploaded after the listing started can never be an orphan. A row inserted between the
listing and the check is seen by the check.

Only buckets something points at are listed (`plan_listing`): the run's bucket (Variable
blobgc_bucket) when a seed layout's table exists or a collection names no bucket of its own, and each
collection's own bucket. Each is checked first: a missing one, or one that refuses the listing, fails
the run at once (`blobgc.core.refusals.MissingBucket`), named with what points at it.

The report says what was not planned and why (`not_planned`), per collection (seed layouts, unknown
keys and inventories per bucket): the objects considered, those a row accounts for, those too young
for the age floor (and when the first becomes eligible), those of no known layout, the orphans planned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import psycopg

from blobgc.core import queries
from blobgc.core.catalog import missing_tables
from blobgc.core.collections import APP_BLOB, BoundCollection, accounted_keys
from blobgc.core.keys import (
    BLOB_OBJECTS,
    IMAGE_FILES,
    MAIL_BLOBS,
    PASTE_CONTENTS,
    KeyLayout,
    blob_keys,
    content_key,
    mail_key,
)
from blobgc.core.objects import HIGHEST, key_before, leading_shards
from blobgc.core.outbox import record_deletions
from blobgc.core.plans import add_plan_item
from blobgc.core.refusals import (
    RUN_BUCKET_VARIABLE,
    check_buckets,
    collection_origin,
    naming_bucket,
    run_bucket_origin,
)
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, add_counts
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

PAGE = 1000
LISTING_MARGIN = timedelta(seconds=2)
# The least age at which an unaccounted-for object may be judged an orphan: an upload whose row is not written
# yet, or a multipart upload (dated by its initiation), must never be one.
MIN_AGE_FLOOR_HOURS = 1


@dataclass(frozen=True)
class KeySource:
    """A key layout (`blobgc.core.keys`) and the queries that ask its table which keys a row accounts for."""

    layout: KeyLayout
    existing_query: str  # ids among %(refs)s that have a row
    rows_query: str  # (id, known keys or NULL) of rows in an id range of a shard
    required_keys: Callable[[str, list[str] | None], list[str]]  # the keys a row must have
    shards_query: str  # the shards (after the prefix) that rows fall in
    keys_query: str  # (key, whether it must exist) of every row: the layout's keys formed in SQL, for inventories

    @property
    def name(self) -> str:
        return self.layout.source

    @property
    def prefix(self) -> str:
        return self.layout.prefix

    def ref_prefix(self, shard_prefix: str) -> str:
        """The id prefix of a shard's rows ("images/3f/" -> "3f", "blobs/a" -> "a")."""
        return shard_prefix[len(self.prefix) :].rstrip("/")


KEY_SOURCES: tuple[KeySource, ...] = (
    KeySource(
        BLOB_OBJECTS,
        "reconcile/select_existing_blobs",
        "reconcile/select_blob_rows_in_range",
        lambda ref, _: [blob_keys(ref)[0]],
        "reconcile/select_blob_shards",
        "reconcile/copy_blob_keys",
    ),
    KeySource(
        PASTE_CONTENTS,
        "reconcile/select_existing_contents",
        "reconcile/select_content_rows_in_range",
        lambda ref, _: [content_key(ref)],
        "reconcile/select_content_shards",
        "reconcile/copy_content_keys",
    ),
    KeySource(
        IMAGE_FILES,
        "reconcile/select_existing_images",
        "reconcile/select_image_rows_in_range",
        lambda ref, known: known or [],
        "reconcile/select_image_shards",
        "reconcile/copy_image_keys",
    ),
    KeySource(
        MAIL_BLOBS,
        "reconcile/select_existing_mail_blobs",
        "reconcile/select_mail_rows_in_range",
        lambda ref, _: [mail_key(ref)],
        "reconcile/select_mail_shards",
        "reconcile/copy_mail_keys",
    ),
)
SOURCES_BY_NAME = {s.name: s for s in KEY_SOURCES}


def present_sources(conn: psycopg.Connection) -> tuple[KeySource, ...]:
    """The seed sources whose table this database has: a deployment without pastes (say) has no pastes/ source,
    and keys there are unknown to it like any other folder's."""
    missing = set(missing_tables(conn, [s.name for s in KEY_SOURCES]))
    return tuple(s for s in KEY_SOURCES if s.name not in missing)


@dataclass(frozen=True)
class Shard(TaskResult):
    """A part of a bucket reconciled by one mapped task: a source's shard, a collection's prefix, or keys of no
    known source."""

    prefix: str
    source: str | None  # None: every key here matches no known layout (unless `collection` is set)
    collection: str | None = None  # a collection's prefix, in the collection's own bucket
    bucket: str | None = None  # None: the run's bucket
    lo: str = ""  # a range of the shard (`split_shard`): its keys from `lo` (inclusive; "" from the start) ...
    hi: str = ""  # ... to `hi` (exclusive; "" to the end)
    inventory: str = ""  # source=inventory: the whole bucket, from the report at this manifest (s3://...)

    @property
    def ranged(self) -> bool:
        return bool(self.lo or self.hi)

    @property
    def name(self) -> str:
        if self.inventory:
            return f"inventory of {self.bucket}"
        name = f"{self.collection}: {self.prefix}" if self.collection else self.prefix or "(top level)"
        return f"{name} [{self.lo or '…'}, {self.hi or '…'})" if self.ranged else name

    @property
    def checkpoint(self) -> str:
        """The shard's name in blobgc.reconcile_checkpoint (a collection's prefix may repeat in another bucket)."""
        name = f"{self.collection}:{self.prefix}" if self.collection else self.prefix
        return f"{name} [{self.lo}, {self.hi})" if self.ranged else name

    def id_bound(self, source: KeySource, key: str) -> str | None:
        """The row id where a range boundary (a key under the shard) falls: the shard's id prefix and the rest of
        the key, or the rest alone where the shard ends at a folder (images/3f/ holds ids 3f...)."""
        if not key:
            return None
        rest = key[len(self.prefix) :]
        return rest if self.prefix.endswith("/") else source.ref_prefix(self.prefix) + rest


def collection_shards(collections: list[BoundCollection]) -> list[Shard]:
    """One shard per literal prefix of each collection's key templates (app_blob is seed 000's source instead)."""
    return [
        Shard(prefix, None, bound.name, bound.bucket)
        for bound in collections
        if not bound.collection.column_mode
        for prefix in bound.collection.prefixes
    ]


def discover_shards(
    s3,
    bucket: str,
    prefixes: list[str] | None = None,
    conn: psycopg.Connection | None = None,
    collections: list[BoundCollection] | None = None,
    seeds: bool = True,
) -> list[Shard]:
    """Walk the bucket for its shards: one listing call per shard found, never a fixed list.

    Under a source's prefix a shard is the prefix plus `shard_chars` characters of the key; with
    `conn`, the shards that the source's rows fall in are added (a shard whose objects are all gone
    still has its missing objects found). Keys outside every source's prefix get one shard per
    top-level folder (and one for loose keys at the top), reported as unknown. `prefixes` keeps
    the shards within (or containing) any of them.

    `collections` adds each collection's shards (`collection_shards`); a top-level folder that holds
    a collection's prefix in this bucket is the collection's, not unknown. Without `seeds`, only the
    collections' shards (and app_blob's, when it is one of them) are planned: a run limited by the
    Param `collections`.
    """
    collections = collections or []
    shards: list[Shard] = []
    present = KEY_SOURCES if conn is None else present_sources(conn)
    seed_sources = (
        present
        if seeds
        else tuple(
            s for s in present if s.layout is BLOB_OBJECTS and any(b.collection.column_mode for b in collections)
        )
    )
    for source in seed_sources:
        found = set(leading_shards(s3, bucket, source.prefix, source.layout.shard_chars))
        if conn is not None:
            found |= {source.prefix + r[0] for r in conn.execute(queries.load(source.shards_query)) if r[0]}
        shards += [Shard(prefix, source.name) for prefix in sorted(found)]
    own = collection_shards(collections)
    shards += own
    # the run's bucket is walked for unknown folders only when something points at it: a seed layout whose table
    # exists, or a collection keeping its objects there (a setup of collections in buckets of their own has none)
    if seeds and (seed_sources or any(b.bucket == bucket for b in collections)):
        known = tuple(s.prefix for s in seed_sources)
        claimed = tuple(s.prefix for s in own if s.bucket == bucket)
        top = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Delimiter="/")
        loose = False
        for page in top:
            for folder in page.get("CommonPrefixes") or []:
                if folder["Prefix"] not in known and not any(c.startswith(folder["Prefix"]) for c in claimed):
                    shards.append(Shard(folder["Prefix"], None))
            loose = loose or bool(page.get("Contents"))
        if loose:
            shards.append(Shard("", None))
    if prefixes:
        shards = [
            s for s in shards if any(s.prefix.startswith(p) or (p.startswith(s.prefix) and s.prefix) for p in prefixes)
        ]
    return shards


MAX_SPLIT_DEPTH = 3  # characters past a shard's prefix that `split_shard` looks at, at most


def split_shard(s3, bucket: str, shard: Shard, ranges: int) -> list[Shard]:
    """Cut a shard into up to `ranges` ranges of its keys, listed side by side by separate mapped tasks.

    The boundaries are sub-prefixes the shard's keys really have: the distinct next characters
    after its prefix, found as `leading_shards` does (one listing call each, skipping each whole),
    one character deeper while there are fewer than `ranges` of them. Each range is listed from
    its first boundary with StartAfter and stops before the next; together they cover the shard
    exactly, keys outside every sub-prefix included (the first range starts at the shard's start,
    the last runs to its end). The loose keys at the top level (listed with a delimiter) stay whole.

    A boundary past the prefix has only characters that sort after "/": a key is its row's id and
    then "/" (blobs/{id}/raw), so an id that ends at or holds a character before "/" ("ab", "ab-c")
    would otherwise fall on one side of a boundary and its key on the other, and the rows' check of
    a range (`Shard.id_bound`) would miss it or call its object missing.
    """
    if ranges <= 1 or (shard.source is None and shard.collection is None and not shard.prefix):
        return [shard]
    subs: list[str] = []
    for depth in range(1, MAX_SPLIT_DEPTH + 1):
        subs = [
            sub
            for sub in leading_shards(s3, shard.bucket or bucket, shard.prefix, depth)
            if all(c > "/" for c in sub[len(shard.prefix) :])
        ]
        if len(subs) >= ranges:
            break
    if len(subs) < 2:
        return [shard]
    step = len(subs) / min(ranges, len(subs))
    bounds = [subs[round(i * step)] for i in range(1, min(ranges, len(subs)))]
    edges = [""] + bounds + [""]
    return [replace(shard, lo=lo, hi=hi) for lo, hi in pairwise(edges)]


def bucket_origins(
    conn: psycopg.Connection,
    bucket: str,
    collections: list[BoundCollection],
    *,
    seeds: bool,
    variable: str = RUN_BUCKET_VARIABLE,
) -> dict[str, list[str]]:
    """Every bucket a listing run lists (`discover_shards`), with what points at it: the run's `bucket` for the seed
    layouts whose table exists and the collections that name no bucket (`variable` names Variable blobgc_bucket),
    each collection's own."""
    present = [s.name for s in present_sources(conn)] if seeds else []
    defaulted = [b.collection for b in collections if not b.collection.bucket and b.bucket == bucket]
    origins: dict[str, list[str]] = {}
    if present or defaulted:
        origins[bucket] = [run_bucket_origin(variable, seed_tables=present, collections=defaulted)]
    for bound in collections:
        if bound.collection.bucket:
            origins.setdefault(bound.bucket, []).append(collection_origin(bound.collection))
    return origins


def plan_listing(
    conn: psycopg.Connection,
    s3,
    bucket: str,
    collections: list[BoundCollection],
    *,
    seeds: bool,
    prefixes: list[str] | None = None,
    ranges: int = 1,
    bucket_variable: str = RUN_BUCKET_VARIABLE,
    list_s3=None,
) -> list[Shard]:
    """A listing run's shards, cut into ranges: only the buckets something points at are listed, and each is checked
    first, so a missing one (or one that refuses the listing) fails the run at once, named with what points at it.

    `list_s3` reaches the collections' buckets (behind their own connections); `s3` the run's bucket."""
    list_s3 = list_s3 or s3
    check_buckets(list_s3, bucket_origins(conn, bucket, collections, seeds=seeds, variable=bucket_variable))
    shards = discover_shards(s3, bucket, prefixes, conn=conn, collections=collections, seeds=seeds)
    return [r for shard in shards for r in split_shard(list_s3, bucket, shard, ranges)]


@dataclass
class PageResult:
    keys: int = 0
    orphans: list[tuple[str, int]] = field(default_factory=list)
    young: int = 0
    accounted: int = 0  # keys a row accounts for
    first_young: datetime | None = None  # the oldest LastModified among the keys too young to judge
    unknown: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@dataclass
class ShardResult(TaskResult):
    shard: str
    pages: int = 0
    keys_checked: int = 0
    orphans: int = 0
    orphan_bytes: int = 0
    too_young: int = 0
    unknown_keys: int = 0
    missing_objects: int = 0
    resumed_after: str = ""
    accounted: int = 0


def list_pages(
    s3, bucket: str, shard: Shard, start_after: str, page_size: int = PAGE
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
    source: KeySource | None,
    shard: Shard,
    contents: list[dict],
    cutoff: datetime,
    after: str,
    last_page: bool,
) -> PageResult:
    """Classify one page's keys, and find the rows whose objects should be in its stretch of the listing but are not.

    The stretch is (`after`, the page's last key]: from the previous page's last key, or the range's
    first boundary, to the range's end on the last page. It is decided in key order, as S3 lists:
    the rows are fetched by an id interval wide enough for every key of the stretch (`id_floor`),
    and each key they must have is judged by where it sorts. Ids and keys sort alike except around
    characters before "/" ("ab-c" sorts after "ab", "blobs/ab-c/raw" before "blobs/ab/raw").
    """
    result = PageResult(keys=len(contents))
    if source is None:
        result.unknown = [o["Key"] for o in contents]
        return result
    if isinstance(source, BoundCollection):
        return check_collection_page(conn, source, contents, cutoff, result)
    refs: dict[str, str] = {}
    for item in contents:
        ref = source.layout.identity(item["Key"])
        if ref is None:
            result.unknown.append(item["Key"])
        else:
            refs[item["Key"]] = ref
    existing = (
        {r[0] for r in conn.execute(queries.load(source.existing_query), {"refs": sorted(set(refs.values()))})}
        if refs
        else set()
    )
    for item in contents:
        ref = refs.get(item["Key"])
        if ref is None:
            continue
        if ref in existing:
            result.accounted += 1
        elif item["LastModified"] < cutoff:
            result.orphans.append((item["Key"], int(item.get("Size") or 0)))
        else:
            count_young(result, item["LastModified"])
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
                result.missing.append(key)
    return result


def check_collection_page(
    conn: psycopg.Connection, bound: BoundCollection, contents: list[dict], cutoff: datetime, result: PageResult
) -> PageResult:
    """A collection's page: keys that fit a template and have no row are orphans (once old enough); keys that
    fit no template are reported. One query per page asks the table (`blobgc.core.collections.accounted_keys`)."""
    accounted, unparsed = accounted_keys(conn, bound, (o["Key"] for o in contents))
    for item in contents:
        key = item["Key"]
        if key in unparsed:
            result.unknown.append(key)
        elif key in accounted:
            result.accounted += 1
        elif item["LastModified"] < cutoff:
            result.orphans.append((key, int(item.get("Size") or 0)))
        else:
            count_young(result, item["LastModified"])
    return result


def count_young(result: PageResult, modified: datetime) -> None:
    """Count a key too young to judge, keeping the oldest such LastModified (when the first becomes eligible)."""
    result.young += 1
    if result.first_young is None or modified < result.first_young:
        result.first_young = modified


def check_age_floor(run: RunRef, cutoff: datetime) -> None:
    """Refuse a cut-off less than MIN_AGE_FLOOR_HOURS before the run's reference time (a min_age_hours below 1)."""
    if run.reference_time is not None and run.reference_time - cutoff < timedelta(hours=MIN_AGE_FLOOR_HOURS):
        raise ConfigurationError(
            f"min_age_hours must be at least {MIN_AGE_FLOOR_HOURS}: a younger object may be an upload "
            f"whose row is not written yet (got a cut-off of {cutoff.isoformat()}, less than "
            f"{MIN_AGE_FLOOR_HOURS} h before the run's reference time {run.reference_time.isoformat()})"
        )


def reconcile_shard(
    conn: psycopg.Connection,
    s3,
    run: RunRef,
    shard: Shard,
    *,
    bucket: str,
    cutoff: datetime,
    page_size: int = PAGE,
    collection: BoundCollection | None = None,
    bucket_origin: str = RUN_BUCKET_VARIABLE,
) -> ShardResult:
    """Reconcile one shard from its checkpoint to its end (see the module docstring); a collection's shard needs
    the collection, bound (`collection`). A bucket that is missing or refuses the listing fails it at once, named
    with what points at it (the collection, or `bucket_origin` for the run's `bucket`)."""
    if shard.collection is not None:
        if collection is None or collection.name != shard.collection:
            raise ValueError(f"shard {shard.name} needs collection {shard.collection} bound")
        source: KeySource | BoundCollection | None = collection
        bucket = collection.bucket
        source_name: str | None = collection.collection.source
        bucket_origin = collection_origin(collection.collection)
    else:
        source = SOURCES_BY_NAME.get(shard.source) if shard.source else None
        source_name = shard.source
    check_age_floor(run, cutoff)
    scope = shard.collection or (APP_BLOB.name if shard.source == APP_BLOB.source else bucket)
    age_floor = (run.reference_time or datetime.now(UTC)) - cutoff  # an object this old is judged
    # never judge an object written after this listing started, whatever the floor (S3 lists
    # LastModified to the second, hence the margin)
    cutoff = min(cutoff, datetime.now(UTC) - LISTING_MARGIN)
    row = conn.execute(
        queries.load("reconcile/select_checkpoint"), {"run_id": run.run_id, "shard": shard.checkpoint}
    ).fetchone()
    result = ShardResult(shard.name)
    if row and row[3]:
        log.info("shard %s was already reconciled by this run", shard.name)
        return result
    start_after = row[0] if row else ""
    result.resumed_after = start_after
    if start_after:
        log.info("shard %s resumes after %s", shard.name, start_after)
    for contents, last_page in pages_naming_bucket(s3, bucket, shard, start_after, page_size, bucket_origin):
        page = check_page(conn, source, shard, contents, cutoff, start_after, last_page)
        with conn.transaction():
            if page.orphans:  # planned; owed after the gate (`blobgc.core.plans.owe_planned_objects`)
                orphan_keys, orphan_sizes = [k for k, _ in page.orphans], [s for _, s in page.orphans]
                add_plan_item(
                    conn,
                    run,
                    part=shard.checkpoint,
                    collection=shard.collection,
                    source=source_name,
                    bucket=bucket,
                    keys=orphan_keys,
                    sizes=orphan_sizes,
                    modified_before=cutoff,
                )
                if run.dry_run:
                    record_deletions(conn, run, source=source_name, bucket=bucket, keys=orphan_keys, sizes=orphan_sizes)
            if page.unknown:
                conn.execute(
                    queries.load("reconcile/insert_findings"),
                    {
                        "run_id": run.run_id,
                        "kind": "unknown_key",
                        "bucket": bucket,
                        "keys": page.unknown,
                        "source": source_name if shard.collection else None,
                    },
                )
            if page.missing:
                conn.execute(
                    queries.load("reconcile/insert_findings"),
                    {
                        "run_id": run.run_id,
                        "kind": "missing_object",
                        "bucket": bucket,
                        "keys": page.missing,
                        "source": source_name,
                    },
                )
            orphan_bytes = sum(s for _, s in page.orphans)
            if run.dry_run:
                add_counts(
                    conn,
                    run,
                    objects=len(page.orphans),
                    bytes_=orphan_bytes,
                    part=shard.checkpoint,
                    collection=shard.collection,
                )
            conn.execute(
                queries.load("reconcile/upsert_checkpoint"),
                {
                    "run_id": run.run_id,
                    "shard": shard.checkpoint,
                    "start_after": contents[-1]["Key"] if contents else start_after,
                    "pending_ref": None,
                    "pending_keys": [],
                    "keys": page.keys,
                    "orphans": len(page.orphans),
                    "orphan_bytes": orphan_bytes,
                    "young": page.young,
                    "unknown": len(page.unknown),
                    "missing": len(page.missing),
                    "done": last_page,
                    "scope": scope,
                    "considered": page.keys,
                    "accounted": page.accounted,
                    "first_eligible_at": page.first_young + age_floor if page.first_young else None,
                },
            )
        if contents:
            start_after = contents[-1]["Key"]
        result.pages += 1
        result.keys_checked += page.keys
        result.orphans += len(page.orphans)
        result.orphan_bytes += orphan_bytes
        result.too_young += page.young
        result.unknown_keys += len(page.unknown)
        result.missing_objects += len(page.missing)
        result.accounted += page.accounted
    log.info(
        "shard %s: %d keys in %d pages, %d accounted for by rows; %d orphans (%d bytes) %s, %d too young to "
        "judge, %d of unknown layout, %d rows missing their object",
        shard.name,
        result.keys_checked,
        result.pages,
        result.accounted,
        result.orphans,
        result.orphan_bytes,
        "would go" if run.dry_run else "planned",
        result.too_young,
        result.unknown_keys,
        result.missing_objects,
    )
    return result


def pages_naming_bucket(
    s3, bucket: str, shard: Shard, start_after: str, page_size: int, origin: str
) -> Iterator[tuple[list[dict], bool]]:
    """`list_pages`, a missing bucket (or one that refuses the listing) raised as a refusal naming it and `origin`."""
    with naming_bucket(bucket, origin):
        yield from list_pages(s3, bucket, shard, start_after, page_size)


def not_planned(conn: psycopg.Connection, run: RunRef) -> dict[str, dict]:
    """What the run considered and did not plan, per collection (a seed layout's keys, and keys of no known layout,
    under their bucket; an inventory's per bucket), logged one plain line each: the objects listed (or read from
    the inventory), those a row accounts for, those too young for the age floor (and when the first of them
    becomes eligible), those of no known layout (reported, never deleted), and the orphans planned."""
    found: dict[str, dict] = {}
    for scope, from_inventory, considered, accounted, too_young, first, planned, unknown in conn.execute(
        queries.load("reconcile/summarize_not_planned"), {"run_id": run.run_id}
    ):
        first = first.astimezone(UTC) if first else None
        found[scope] = {
            "considered": int(considered),
            "accounted": int(accounted),
            "too_young": int(too_young),
            "first_eligible_at": first.isoformat() if first else None,
            "planned": int(planned),
            "unknown": int(unknown),
        }
        eligible = f" (the first becomes eligible {first:%Y-%m-%d %H:%M} UTC)" if first else ""
        log.info(
            "%s: %d objects %s, %d accounted for by rows, %d younger than the floor%s, %d of no known layout "
            "(reported, never deleted), %d orphans %s",
            scope,
            considered,
            "read from the inventory" if from_inventory else "listed",
            accounted,
            too_young,
            eligible,
            unknown,
            planned,
            "planned (dry run: nothing is deleted)" if run.dry_run else "planned",
        )
    return found


def summarize(conn: psycopg.Connection, run: RunRef) -> dict[str, int]:
    """The run's shards, pages, keys checked, orphans and findings, from its checkpoints."""
    row = conn.execute(queries.load("reconcile/summarize_run"), {"run_id": run.run_id}).fetchone()
    names = (
        "shards",
        "shards_done",
        "pages",
        "keys_checked",
        "orphans",
        "orphan_bytes",
        "too_young",
        "unknown_keys",
        "missing_objects",
    )
    return {name: int(value) for name, value in zip(names, row, strict=True)}
