"""Reconcile from an S3 Inventory report instead of listing: an out-of-core anti-join, then the live check.

A bucket of a billion objects takes a million LIST calls to walk. Its daily inventory report
already lists every key with its size and LastModified, so one task per bucket:

1. reads the newest report (`blobgc.core.inventory`: the manifest and its checksum, each data
   file's MD5) into DuckDB, in a scratch directory, its memory bounded and the rest spilled;
2. streams every key the database accounts for into DuckDB beside it (PostgreSQL `COPY ... TO
   STDOUT`): each seed layout's keys formed in SQL (`KeySource.keys_query`) and each collection's
   templates (`BoundCollection.rendered_keys`), with whether the row must have that object;
3. anti-joins the two, hash-partitioned into parts of about `PART_ROWS` inventory keys, each part
   joined alone so memory stays bounded at any scale;
4. checks each part's leftovers against the live database exactly as a listing's page is checked
   (a key's layout or template names its row; one query per 1000 keys). Orphans older than the
   cut-off by the report are owed through the same deletion log and outbox as listed ones. The
   report is hours old, so their log rows carry the cut-off: the drain, under each layout's guard
   and just before deleting, asks the store for each object now (`blobgc.core.outbox`). An object
   written again since is kept (its row may be on its way), one deleted since is settled as
   absent (never counted, never an error), and a row inserted since keeps its key;
5. keys the rows must have and the report lacks are asked of the store before they are recorded
   as missing objects: an object written after the report is not missing.

What is in scope is what a listing run would list (`Scope`): the same sources, collections,
unknown folders and Param `prefixes`, so both sources find the same orphans, unknown keys and
missing objects. Each batch of a part is recorded in one transaction with the part's checkpoint
(its phase and last key); a retry resumes after it.
"""

from __future__ import annotations

import logging
import math
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql

from blobgc.collectors.reconcile import (
    BLOB_OBJECTS,
    PAGE,
    KeySource,
    Shard,
    ShardResult,
    check_age_floor,
    present_sources,
)
from blobgc.core import queries
from blobgc.core.collections import BoundCollection, accounted_keys
from blobgc.core.inventory import (
    Destination,
    Engine,
    InventoryError,
    Report,
    download,
    engine,
    find_report,
    read_manifest,
)
from blobgc.core.objects import object_stats
from blobgc.core.outbox import record_in_batches
from blobgc.core.plans import add_plan_item
from blobgc.core.runs import RunRef, add_counts

log = logging.getLogger(__name__)

PART_ROWS = 5_000_000  # inventory keys per part of the anti-join: about 1 GB of DuckDB memory at most
COPY_CHUNK = 256 << 20  # bytes of COPY output loaded into DuckDB at a time
LEFTOVERS, LACKING = "leftovers", "lacking"  # a part's two phases, in its checkpoint
BATCH = PAGE  # keys checked and recorded per transaction


@dataclass(frozen=True)
class Scope:
    """What a run reconciles in one bucket, as a listing run would plan it (`discover_shards`)."""

    bucket: str
    sources: tuple[KeySource, ...]  # seed layouts reconciled here (the run's bucket only)
    collections: tuple[BoundCollection, ...]  # collections with their objects here (app_blob is a seed source)
    unknown: bool  # whether keys of no source or collection are reported (a run of every seed, the run's bucket)
    prefixes: tuple[str, ...] = ()  # Param `prefixes`: shards within (or containing) any of them

    def owner(self, key: str) -> tuple[KeySource | BoundCollection | None, str] | None:
        """(what accounts for the key, or None for a key of no known layout; its shard), or None out of scope."""
        for source in self.sources:
            if key.startswith(source.prefix):
                return source, source.layout.shard(key)
        for bound in self.collections:
            for prefix in bound.collection.prefixes:
                if key.startswith(prefix):
                    return bound, prefix
        if not self.unknown:
            return None
        slash = key.find("/")
        folder = key[: slash + 1] if slash >= 0 else ""
        if folder and (
            any(s.prefix == folder for s in self.sources)
            or any(p.startswith(folder) for b in self.collections for p in b.collection.prefixes)
        ):
            return None  # a folder that a collection's prefix lies in is the collection's, not unknown
        return None, folder

    def within(self, shard: str) -> bool:
        return not self.prefixes or any(shard.startswith(p) or (shard and p.startswith(shard)) for p in self.prefixes)


def scopes(
    conn: psycopg.Connection,
    run_bucket: str,
    collections: list[BoundCollection],
    *,
    seeds: bool,
    prefixes: list[str] | None,
) -> list[Scope]:
    """One scope per bucket a listing run would list: the run's bucket, and each collection's own bucket.

    A run limited by the Param `collections` (`seeds` false) reads only the buckets its collections' objects are in
    (app_blob's, seed 000's layout, are in the run's bucket): no other bucket, the run's included, is read or needs
    a report."""
    present = present_sources(conn)
    if seeds:
        sources = present
    else:  # a run limited to collections: app_blob's objects are seed 000's layout
        sources = tuple(
            s for s in present if s.layout is BLOB_OBJECTS and any(b.collection.column_mode for b in collections)
        )
    own = [b for b in collections if not b.collection.column_mode]
    buckets = dict.fromkeys([run_bucket] + [b.bucket for b in own])
    # the run's bucket's unknown keys are reported only when something points at it (a seed layout whose table
    # exists, or a collection there): a setup of collections in buckets of their own neither reads nor needs its report
    pointed = bool(sources) or any(b.bucket == run_bucket for b in collections)
    planned = [
        Scope(
            bucket,
            sources if bucket == run_bucket else (),
            tuple(b for b in own if b.bucket == bucket),
            seeds and bucket == run_bucket and pointed,
            tuple(prefixes or ()),
        )
        for bucket in buckets
    ]
    # a bucket is read only for what the run reconciles there and the Param `prefixes` leaves in it: the run's
    # bucket always when it reconciles every seed layout (its unknown folders too), any bucket for its sources or
    # collections
    return [
        s
        for s in planned
        if s.unknown
        or any(s.within(source.prefix) for source in s.sources)
        or any(s.within(p) for b in s.collections for p in b.collection.prefixes)
    ]


def scope_of(
    conn: psycopg.Connection,
    run_bucket: str,
    collections: list[BoundCollection],
    bucket: str,
    *,
    seeds: bool,
    prefixes: list[str] | None,
) -> Scope:
    """The scope of one bucket of the run (`scopes`)."""
    for scope in scopes(conn, run_bucket, collections, seeds=seeds, prefixes=prefixes):
        if scope.bucket == bucket:
            return scope
    raise ValueError(
        f"bucket {bucket} is no longer part of this run: its collections were removed from the "
        "collections file since the run was planned"
    )


@dataclass
class Part:
    """One batch's findings (a part's are recorded batch by batch, in the part's one transaction)."""

    orphans: list[tuple[str, int]] = field(default_factory=list)
    young: int = 0
    unknown: list[tuple[str, str | None]] = field(default_factory=list)  # (key, its collection's source or None)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (key, source)
    considered: int = 0  # keys in the run's scope
    accounted: int = 0  # of them, keys a row accounts for
    first_young_ms: int | None = None  # the oldest LastModified (ms) among the keys too young to judge


def copy_accounted(conn: psycopg.Connection, db: Engine, scope: Scope, scratch: Path) -> int:
    """Every key the scope's rows account for into DuckDB table `accounted`, through COPY in chunks."""
    statements: list[tuple[str, sql.Composable]] = [
        (s.name, sql.SQL(queries.load(s.keys_query))) for s in scope.sources
    ]
    statements += [(b.name, b.rendered_keys()) for b in scope.collections]
    db.db.execute("CREATE OR REPLACE TABLE accounted (key VARCHAR, required BOOLEAN, h UBIGINT)")
    path = scratch / "accounted.csv"
    for name, statement in statements:
        with (
            conn.cursor() as cursor,
            cursor.copy(sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(statement)) as copy,
        ):
            out, written = path.open("wb"), 0
            try:
                for chunk in copy:
                    out.write(chunk)
                    written += len(chunk)
                    if written >= COPY_CHUNK:
                        out.close()
                        db.load_accounted(path)
                        out, written = path.open("wb"), 0
            finally:
                out.close()
            db.load_accounted(path)
        log.info("accounted-for keys of %s copied", name)
    path.unlink(missing_ok=True)
    return db.db.execute("SELECT count(*) FROM accounted").fetchone()[0]


def classify(
    conn: psycopg.Connection, scope: Scope, items: list[tuple[str, int, int]], cutoff_ms: int, part: Part
) -> None:
    """Check inventory keys that no formed key matched against the live database, as a listing's page is."""
    by_owner: dict[int, tuple[KeySource | BoundCollection, list[tuple[str, int, int]]]] = {}
    for item in items:
        owned = scope.owner(item[0])
        if owned is None or not scope.within(owned[1]):
            continue
        part.considered += 1
        owner = owned[0]
        if owner is None:
            part.unknown.append((item[0], None))
        else:
            by_owner.setdefault(id(owner), (owner, []))[1].append(item)
    for owner, owned_items in by_owner.values():
        keys = [k for k, _, _ in owned_items]
        if isinstance(owner, BoundCollection):
            accounted, unparsed = accounted_keys(conn, owner, keys)
            part.unknown += [(k, owner.collection.source) for k in keys if k in unparsed]
        else:
            refs = {k: ref for k in keys if (ref := owner.layout.identity(k)) is not None}
            part.unknown += [(k, None) for k in keys if k not in refs]
            existing = (
                {r[0] for r in conn.execute(queries.load(owner.existing_query), {"refs": sorted(set(refs.values()))})}
                if refs
                else set()
            )
            accounted = {k for k, ref in refs.items() if ref in existing}
            unparsed = set(keys) - set(refs)
        for key, size, modified_ms in owned_items:
            if key in unparsed:
                continue
            if key in accounted:
                part.accounted += 1
            elif modified_ms < cutoff_ms:
                part.orphans.append((key, size))
            else:
                part.young += 1
                if part.first_young_ms is None or modified_ms < part.first_young_ms:
                    part.first_young_ms = modified_ms


def batches(rows: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    batch: list[tuple] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def source_of(owner: KeySource | BoundCollection) -> str:
    return owner.collection.source if isinstance(owner, BoundCollection) else owner.name


def record_batch(
    conn: psycopg.Connection, run: RunRef, scope: Scope, name: str, found: Part, result: ShardResult, cutoff: datetime
) -> None:
    """Plan a batch's orphans and record its findings (inside the batch's transaction); add them to `result`.

    The orphans are judged by the report's LastModified, hours old: their log rows carry the cut-off, and the drain
    asks the store about each just before deleting it (`blobgc.core.outbox`): an object written again since is
    kept (its row may be on its way), one deleted since is settled as absent, never counted, never an error."""
    by_owner: dict[str, tuple[KeySource | BoundCollection, list[tuple[str, int]]]] = {}
    for key, size in found.orphans:
        owner = scope.owner(key)[0]  # type: ignore[index]
        by_owner.setdefault(source_of(owner), (owner, []))[1].append((key, size))
    for source, (owner, orphans) in by_owner.items():
        collection = owner.name if isinstance(owner, BoundCollection) else None
        for start in range(0, len(orphans), PAGE):  # planned; owed after the gate, checked again by the drain
            chunk = orphans[start : start + PAGE]
            add_plan_item(
                conn,
                run,
                part=name,
                collection=collection,
                source=source,
                bucket=scope.bucket,
                keys=[k for k, _ in chunk],
                sizes=[s for _, s in chunk],
                modified_before=cutoff,
            )
        if run.dry_run:  # a dry run's part belongs to one collection
            record_in_batches(
                conn,
                run,
                source=source,
                bucket=scope.bucket,
                keys=[k for k, _ in orphans],
                sizes=[s for _, s in orphans],
                batch_size=PAGE,
                part=name,
                modified_before=cutoff,
            )
            add_counts(
                conn,
                run,
                objects=len(orphans),
                bytes_=sum(s for _, s in orphans),
                part=f"{name} {collection}" if collection else name,
                collection=collection,
            )
    for kind, keys_found in (("unknown_key", found.unknown), ("missing_object", found.missing)):
        for source in {s for _, s in keys_found}:
            conn.execute(
                queries.load("reconcile/insert_findings"),
                {
                    "run_id": run.run_id,
                    "kind": kind,
                    "bucket": scope.bucket,
                    "source": source,
                    "keys": [k for k, s in keys_found if s == source],
                },
            )
    result.orphans += len(found.orphans)
    result.accounted += found.accounted
    result.orphan_bytes += sum(size for _, size in found.orphans)
    result.too_young += found.young
    result.unknown_keys += len(found.unknown)
    result.missing_objects += len(found.missing)


def checkpoint(
    conn: psycopg.Connection,
    run: RunRef,
    name: str,
    phase: str,
    after: str,
    found: Part,
    *,
    keys: int = 0,
    done: bool = False,
    bucket: str | None = None,
    age_floor: timedelta = timedelta(0),
) -> None:
    """Record a part's progress and add a batch's counts; its report counts under `bucket` (`not_planned`)."""
    first = found.first_young_ms
    conn.execute(
        queries.load("reconcile/upsert_checkpoint"),
        {
            "run_id": run.run_id,
            "shard": name,
            "start_after": after,
            "pending_ref": phase,
            "pending_keys": [],
            "keys": keys,
            "orphans": len(found.orphans),
            "orphan_bytes": sum(s for _, s in found.orphans),
            "young": found.young,
            "unknown": len(found.unknown),
            "missing": len(found.missing),
            "done": done,
            "scope": bucket,
            "considered": found.considered,
            "accounted": found.accounted,
            "first_eligible_at": None if first is None else datetime.fromtimestamp(first / 1000, UTC) + age_floor,
        },
    )


def reconcile_part(
    conn: psycopg.Connection,
    s3,
    db: Engine,
    run: RunRef,
    scope: Scope,
    name: str,
    p: int,
    parts: int,
    cutoff: datetime,
    age_floor: timedelta = timedelta(0),
) -> ShardResult:
    """One part of the anti-join, a batch of up to 1000 keys at a time, each batch recorded in its own transaction
    with the part's checkpoint (the phase and the last key done), so a retry resumes after it:

    1. the report's keys that no row forms (in key order), checked against the live database, the orphans
       among them owed with the run's cut-off for the drain to check again;
    2. the keys rows must have that the report lacks (in key order), asked of the store.
    """
    result = ShardResult(name)
    row = conn.execute(queries.load("reconcile/select_checkpoint"), {"run_id": run.run_id, "shard": name}).fetchone()
    phase, after = (row[1], row[0]) if row else (LEFTOVERS, "")
    cutoff_ms = int(cutoff.timestamp() * 1000)
    # the part's hash bucket as constants: bound as parameters, DuckDB compared the UBIGINT hash through a cast
    # and the anti-join ran four times slower
    in_part = f"h % {int(parts)} = {int(p)}"
    if phase == LEFTOVERS:
        leftovers = db.query(
            f"""
            SELECT i.key, i.size, i.modified_ms
            FROM (SELECT key, size, modified_ms FROM inventory WHERE {in_part} AND key > $1) AS i
            ANTI JOIN (SELECT key FROM accounted WHERE {in_part}) AS a USING (key)
            ORDER BY i.key""",
            [after],
        )
        for batch in batches(leftovers, BATCH):
            found = Part()
            classify(conn, scope, batch, cutoff_ms, found)
            with conn.transaction():
                record_batch(conn, run, scope, name, found, result, cutoff)
                checkpoint(conn, run, name, LEFTOVERS, batch[-1][0], found, bucket=scope.bucket, age_floor=age_floor)
            result.pages += 1
        phase, after = LACKING, ""
    lacking = db.query(
        f"""
        SELECT a.key FROM (SELECT key FROM accounted WHERE required AND {in_part} AND key > $1) AS a
        ANTI JOIN (SELECT key FROM inventory WHERE {in_part}) AS i USING (key)
        ORDER BY a.key""",
        [after],
    )
    for batch in batches(lacking, BATCH):
        found = Part()
        owned = [
            (key, o[0])
            for (key,) in batch
            if (o := scope.owner(key)) is not None and isinstance(o[0], KeySource) and scope.within(o[1])
        ]
        if owned:  # written since the report was taken, or really missing: the store says which
            present = object_stats(s3, scope.bucket, [k for k, _ in owned])
            found.missing = [(key, source.name) for key, source in owned if key not in present]
        with conn.transaction():
            record_batch(conn, run, scope, name, found, result, cutoff)
            checkpoint(conn, run, name, LACKING, batch[-1][0], found, bucket=scope.bucket)
        result.pages += 1
    result.keys_checked = db.db.execute(f"SELECT count(*) FROM inventory WHERE {in_part}").fetchone()[0]
    # the report's keys some row forms: considered and accounted for without a look at the live database
    matched = db.db.execute(f"""
        SELECT count(*) FROM (SELECT key FROM inventory WHERE {in_part}) AS i
        SEMI JOIN (SELECT key FROM accounted WHERE {in_part}) AS a USING (key)""").fetchone()[0]
    result.accounted += matched
    with conn.transaction():
        checkpoint(
            conn,
            run,
            name,
            LACKING,
            "",
            Part(considered=matched, accounted=matched),
            keys=result.keys_checked,
            done=True,
            bucket=scope.bucket,
        )
    return result


def done_parts(conn: psycopg.Connection, run: RunRef, names: Iterable[str]) -> set[str]:
    wanted = list(names)
    return {
        r[0]
        for r in conn.execute(
            "SELECT shard FROM blobgc.reconcile_checkpoint WHERE run_id = %s AND shard = ANY(%s) AND done",
            (run.run_id, wanted),
        )
    }


def reconcile_from_inventory(
    conn: psycopg.Connection,
    s3,
    inventory_s3,
    run: RunRef,
    scope: Scope,
    manifest: str,
    *,
    cutoff: datetime,
    max_age_hours: float,
    workdir: Path | None = None,
    memory_limit: str = "1GB",
    part_rows: int = PART_ROWS,
) -> ShardResult:
    """Reconcile one bucket from the report at `manifest` (`s3://bucket/key` of its manifest.json).

    `inventory_s3` reads the report's bucket; `s3` asks the reconciled bucket about missing objects.
    """
    check_age_floor(run, cutoff)
    age_floor = (run.reference_time or datetime.now(UTC)) - cutoff  # an object this old is judged
    where = Destination.parse(manifest.rsplit("/", 1)[0], source_bucket=scope.bucket)
    configuration = where.prefix.rstrip("/").split("/")[-2]
    report = read_manifest(
        inventory_s3,
        where.bucket,
        f"{where.prefix}manifest.json",
        source_bucket=scope.bucket,
        configuration=configuration,
    )
    report.check_age(run.reference_time or datetime.now(UTC), max_age_hours)
    result = ShardResult(f"inventory of {scope.bucket}")
    base = Path(workdir or tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix="blobgc-inventory-", dir=base) as scratch_dir:
        scratch = Path(scratch_dir)
        with engine(scratch / "duckdb", memory_limit=memory_limit) as db:
            paths = download(inventory_s3, report, scratch / "files")
            rows = db.load_inventory(report, paths)
            for path in paths:
                path.unlink()
            parts = max(1, math.ceil(rows / part_rows))
            names = [f"inventory:{scope.bucket}:{p + 1}/{parts}" for p in range(parts)]
            done = done_parts(conn, run, names)
            if len(done) == parts:
                log.info("every part of %s's inventory was already reconciled by this run", scope.bucket)
                return result
            accounted = copy_accounted(conn, db, scope, scratch)
            log.info(
                "%s: %d inventory keys (%s, taken %s) against %d keys the rows form, in %d part(s)",
                scope.bucket,
                rows,
                report.location,
                report.created.isoformat(),
                accounted,
                parts,
            )
            for p, name in enumerate(names):
                if name in done:
                    continue
                part = reconcile_part(conn, s3, db, run, scope, name, p, parts, cutoff, age_floor)
                for total in (
                    "keys_checked",
                    "orphans",
                    "orphan_bytes",
                    "too_young",
                    "unknown_keys",
                    "missing_objects",
                    "accounted",
                ):
                    setattr(result, total, getattr(result, total) + getattr(part, total))
                result.pages += 1
    log.info(
        "%s from its inventory: %d keys in %d part(s), %d accounted for by rows; %d orphans (%d bytes) %s, "
        "%d too young to judge, %d of unknown layout, %d rows missing their object",
        scope.bucket,
        result.keys_checked,
        result.pages,
        result.accounted,
        result.orphans,
        result.orphan_bytes,
        "would go" if run.dry_run else "owed",
        result.too_young,
        result.unknown_keys,
        result.missing_objects,
    )
    return result


def report_shards(
    inventory_s3,
    destinations: dict[str, str],
    in_scope: Iterable[Scope],
    reference_time: datetime | None,
    max_age_hours: float,
) -> list[Shard]:
    """An inventory run's shards: one per bucket in scope, each its newest usable report (`locate`)."""
    reports = [locate(inventory_s3, destinations, scope.bucket, reference_time, max_age_hours) for scope in in_scope]
    return [Shard("", None, bucket=r.source_bucket, inventory=r.location) for r in reports]


def locate(
    inventory_s3, destinations: dict[str, str], bucket: str, reference_time: datetime | None, max_age_hours: float
) -> Report:
    """The newest usable report of `bucket` (Variable blobgc_inventory names its destination), checked for age."""
    if bucket not in destinations:
        raise InventoryError(
            f"source=inventory, but Variable blobgc_inventory names no inventory destination for "
            f"bucket {bucket} (it names {', '.join(sorted(destinations)) or 'none'})"
        )
    report = find_report(inventory_s3, Destination.parse(destinations[bucket], source_bucket=bucket), bucket)
    report.check_age(reference_time or datetime.now(UTC), max_age_hours)
    return report
