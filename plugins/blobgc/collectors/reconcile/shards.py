"""The parts a listing run reconciles, one mapped task each: shards found by walking the buckets, cut into ranges.

Shards are discovered by walking the bucket, never listed from a fixed table: under a key source's prefix
a shard is the prefix plus the layout's `shard_chars` characters of the key (and every shard the source's
rows fall in, so a shard whose objects are all gone still has its missing objects found); keys outside
every source's prefix get one shard per top-level folder (and one for loose keys at the top), reported as
unknown; a collection of the collections file other than app_blob is one shard per literal prefix of its
key templates, in its own bucket.

Only buckets something points at are listed (`plan_listing`): the run's bucket (Variable blobgc_bucket)
when a seed layout's table exists or a collection names no bucket of its own, and each collection's own
bucket. Each is checked first: a missing one, or one that refuses the listing, fails the run at once
(`blobgc.core.refusals.MissingBucket`), named with what points at it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise

import psycopg

from blobgc.collectors.reconcile import KEY_SOURCES, present_sources
from blobgc.collectors.reconcile.checks import WAITING_SAMPLE, Findings
from blobgc.core import queries
from blobgc.core.collections import BoundCollection
from blobgc.core.keys import KeySource
from blobgc.core.objects import ObjectStore, leading_shards
from blobgc.core.quarantine import in_quarantine
from blobgc.core.refusals import RUN_BUCKET_VARIABLE, check_buckets, collection_origin, run_bucket_origin
from blobgc.core.results import TaskResult, local
from blobgc.core.scratch import is_scratch

MAX_SPLIT_DEPTH = 3  # characters past a shard's prefix that `split_shard` looks at, at most


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
    inventory: str = ""  # source=inventory: the bucket, from the report at this manifest (s3://...) ...
    part: int = 0  # ... one part of its anti-join, by key hash (`from_inventory.prepare_parts`) ...
    parts: int = 0  # ... of this many (0: the whole bucket in one task) ...
    scratch: str = ""  # ... whose files are in this folder of the scratch location (blobgc.core.scratch) ...
    keys: int = 0  # ... holding this many report keys ...
    formed: int = 0  # ... and this many keys the rows form

    @property
    def ranged(self) -> bool:
        return bool(self.lo or self.hi)

    @property
    def name(self) -> str:
        if self.inventory:
            return f"inventory of {self.bucket}" + (f", part {self.part + 1}/{self.parts}" if self.parts else "")
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


@dataclass
class ShardResult(TaskResult):
    """What one mapped task found in its shard (or a bucket's inventory), for its XCom and the run's report."""

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
    waiting: int = 0  # orphans found on fewer real runs in a row than Param `confirmations`: not planned yet
    waiting_sample: list[str] = local()  # a few of their keys, for the task's log

    def add(self, found: Findings) -> None:
        """Count a page's or a batch's findings in (the keys checked and the pages are counted by the caller)."""
        self.accounted += found.accounted
        self.orphans += len(found.orphans)
        self.waiting += len(found.waiting)
        self.waiting_sample += [key for key, _ in found.waiting[: WAITING_SAMPLE - len(self.waiting_sample)]]
        self.orphan_bytes += found.orphan_bytes
        self.too_young += found.young
        self.unknown_keys += len(found.unknown)
        self.missing_objects += len(found.missing)


def sources_in_run(
    present: tuple[KeySource, ...], collections: list[BoundCollection], *, seeds: bool
) -> tuple[KeySource, ...]:
    """The key sources a run reconciles among those `present`: all of them, or, for a run limited by the Param
    `collections` (`seeds` false), those whose table is one of its collections in column mode (app_blob's)."""
    if seeds:
        return present
    return tuple(
        s for s in present if any(b.collection.column_mode and b.collection.source == s.name for b in collections)
    )


def collection_shards(collections: list[BoundCollection]) -> list[Shard]:
    """One shard per literal prefix of each collection's key templates (app_blob is seed 000's source instead)."""
    return [
        Shard(prefix, None, bound.name, bound.bucket)
        for bound in collections
        if not bound.collection.column_mode
        for prefix in bound.collection.prefixes
    ]


def discover_shards(
    s3: ObjectStore,
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
    seed_sources = sources_in_run(present, collections, seeds=seeds)
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
                if in_quarantine(folder["Prefix"]) or is_scratch(folder["Prefix"]):
                    continue  # deleted objects waiting in quarantine, runs' scratch files: never orphans or unknown
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


def split_shard(s3: ObjectStore, bucket: str, shard: Shard, ranges: int) -> list[Shard]:
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
    s3: ObjectStore,
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
