"""Reconcile from an S3 Inventory report instead of listing: an out-of-core anti-join by parts, then the live check.

A bucket of a billion objects takes a million LIST calls to walk. Its daily inventory report
already lists every key with its size and LastModified, so:

1. the report is read (`blobgc.core.inventory_reports`: the manifest and its checksum, each data
   file's MD5) into DuckDB, in a scratch directory, its memory bounded and the rest spilled;
2. every key the database accounts for is streamed into DuckDB beside it (PostgreSQL `COPY ... TO
   STDOUT`): each seed layout's keys formed in SQL (`KeySource.keys_query`) and each collection's
   templates (`BoundCollection.rendered_keys`), with whether the row must have that object;
3. both are written once into Parquet part files by the key's hash, about `PART_ROWS` report keys a part
   (`write_parts`), so that each part is anti-joined alone, from its own files: the time of the join grows
   linearly with the keys, and its memory stays that of one part. In a DAG, steps 1-3 are the first task
   (`prepare_parts`), which puts the part files in the scratch location (`blobgc.core.scratch`: a bucket, which
   every worker reads), and each part is a mapped task of its own (`reconcile_inventory_part`), on any Celery
   worker, retried alone; a part's files are deleted once it is done. `reconcile_from_inventory` does it all in
   one process, on its own disk;
4. checks each part's leftovers against the live database exactly as a listing's page is checked
   (`checks.judge_keys`: a key's layout or template names its row; one query per 1000 keys). Orphans older than the
   cut-off by the report, and found orphaned on `confirmations` real runs in a row (`sightings`, whichever source
   found them), are owed through the same deletion log and outbox as listed ones. The
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

The DuckDB statements are files (`blobgc/sql/inventory/`); a part is the keys whose hash `h` leaves
`part` modulo `parts`, its statements run on views `inventory` and `accounted` over its files alone.
"""

from __future__ import annotations

import hashlib
import logging
import math
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql

from blobgc.collectors.reconcile import present_sources
from blobgc.collectors.reconcile.checks import (
    LACKING,
    LEFTOVERS,
    PAGE,
    WAITING_SAMPLE,
    Findings,
    Owner,
    advance_checkpoint,
    check_age_floor,
    judge_keys,
    judged_age,
    owner_source,
    plan_orphans,
    read_checkpoint,
    report_findings,
)
from blobgc.collectors.reconcile.shards import Shard, ShardResult, sources_in_run
from blobgc.collectors.reconcile.sightings import Passes, confirm_orphans, start_pass
from blobgc.core import inventory_azure, inventory_gcs, queries
from blobgc.core.collections import BoundCollection
from blobgc.core.inventory_reports import (
    PART_SIDES,
    Destination,
    Engine,
    InventoryError,
    Report,
    download,
    engine,
    find_report,
    part_folder,
    read_manifest,
)
from blobgc.core.keys import KeySource
from blobgc.core.objects import ObjectStore, object_stats
from blobgc.core.quarantine import in_quarantine
from blobgc.core.runs import RunRef
from blobgc.core.scratch import Location, delete_tree, fetch_tree, is_scratch, put_tree, run_folder

log = logging.getLogger(__name__)

PART_ROWS = 5_000_000  # inventory keys per part of the anti-join: about 1 GB of DuckDB memory at most
COPY_CHUNK = 256 << 20  # bytes of COPY output loaded into DuckDB at a time
BATCH = PAGE  # keys checked and recorded per transaction
# a bucket's figures: the sums of its parts'
TOTALS = (
    "keys_checked",
    "orphans",
    "orphan_bytes",
    "too_young",
    "unknown_keys",
    "missing_objects",
    "accounted",
    "waiting",
)


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
    sources = sources_in_run(present_sources(conn), collections, seeds=seeds)
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


def copy_accounted(conn: psycopg.Connection, db: Engine, scope: Scope, scratch: Path) -> int:
    """Every key the scope's rows account for into DuckDB table `accounted`, through COPY in chunks."""
    statements: list[tuple[str, sql.Composable]] = [
        (s.name, sql.SQL(queries.load(s.keys_query))) for s in scope.sources
    ]
    statements += [(b.name, b.rendered_keys()) for b in scope.collections]
    db.create_accounted()
    path = scratch / "accounted.csv"
    for name, statement in statements:
        copy_out = sql.SQL(queries.load("reconcile/copy_accounted_keys")).format(statement=statement)
        with conn.cursor() as cursor, cursor.copy(copy_out) as copy:
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
    return db.count("inventory/count_accounted_keys")


def classify(
    conn: psycopg.Connection, scope: Scope, items: list[tuple[str, int, int]], cutoff: datetime, found: Findings
) -> None:
    """Check inventory keys that no formed key matched against the live database, as a listing's page is."""
    by_owner: dict[int, tuple[Owner, list[tuple[str, int, datetime]]]] = {}
    for key, size, modified_ms in items:
        if in_quarantine(key) or is_scratch(key):
            continue  # a deleted object waiting in quarantine, or a run's scratch file: never an orphan or unknown
        owned = scope.owner(key)
        if owned is None or not scope.within(owned[1]):
            continue
        found.considered += 1
        owner = owned[0]
        if owner is None:
            found.unknown.append((key, None))
        else:
            modified = datetime.fromtimestamp(modified_ms / 1000, UTC)
            by_owner.setdefault(id(owner), (owner, []))[1].append((key, size, modified))
    for owner, owned_items in by_owner.values():
        judge_keys(conn, owner, owned_items, cutoff, found)


def batches(rows: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    """`rows` in lists of `size` (the last one shorter): each batch is checked and recorded in one transaction."""
    batch: list[tuple] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def record_batch(
    conn: psycopg.Connection,
    run: RunRef,
    scope: Scope,
    name: str,
    found: Findings,
    result: ShardResult,
    cutoff: datetime,
    passes: Passes,
) -> None:
    """Plan a batch's orphans found on enough real runs in a row (`sightings.confirm_orphans`; the others wait) and
    record its findings (inside the batch's transaction); add them to `result`.

    The orphans are judged by the report's LastModified, hours old: their plan items carry the cut-off, and the drain
    asks the store about each just before deleting it (`blobgc.core.outbox`): an object written again since is
    kept (its row may be on its way), one deleted since is settled as absent, never counted, never an error. A dry
    run's report counts each collection's under a part of its own."""
    confirm_orphans(conn, passes, scope.bucket, found)
    by_owner: dict[str, tuple[Owner, list[tuple[str, int, datetime]]]] = {}
    for orphan in found.orphans:
        owner = scope.owner(orphan[0])[0]  # type: ignore[index]
        by_owner.setdefault(owner_source(owner), (owner, []))[1].append(orphan)  # type: ignore[arg-type]
    for owner, orphans in by_owner.values():
        collection = owner.name if isinstance(owner, BoundCollection) else None
        plan_orphans(
            conn,
            run,
            owner,
            orphans,
            part=name,
            bucket=scope.bucket,
            cutoff=cutoff,
            counts_part=f"{name} {collection}" if collection else name,
        )
    report_findings(conn, run, scope.bucket, found)
    result.add(found)


def part_name(bucket: str, p: int, parts: int, manifest: str) -> str:
    """A part's name: its checkpoint (blobgc.reconcile_checkpoint) and its result's. It names the report (a digest of
    its manifest's location): a run cleared whole, which finds a newer report, never resumes the older one's parts."""
    report = hashlib.sha256(manifest.encode()).hexdigest()[:8]
    return f"inventory:{bucket}:{report}:{p + 1}/{parts}"


def reconcile_part(
    conn: psycopg.Connection,
    s3: ObjectStore,
    db: Engine,
    run: RunRef,
    scope: Scope,
    name: str,
    cutoff: datetime,
    passes: Passes,
    age_floor: timedelta = timedelta(0),
) -> ShardResult:
    """One part of the anti-join (`db` opened on its files, `Engine.open_part`), a batch of up to 1000 keys at a
    time, each batch recorded in its own transaction with the part's checkpoint (the phase and the last key done), so
    a retry resumes after it:

    1. the report's keys that no row forms (in key order), checked against the live database, the orphans
       among them owed with the run's cut-off for the drain to check again;
    2. the keys rows must have that the report lacks (in key order), asked of the store.
    """
    result = ShardResult(name)
    checkpoint = read_checkpoint(conn, run, name)
    phase, after = (checkpoint.inventory_phase, checkpoint.start_after) if checkpoint else (LEFTOVERS, "")
    if phase == LEFTOVERS:
        leftovers = db.query("inventory/select_leftover_keys", {"after": after})
        for batch in batches(leftovers, BATCH):
            found = Findings()
            classify(conn, scope, batch, cutoff, found)
            with conn.transaction():
                record_batch(conn, run, scope, name, found, result, cutoff, passes)
                advance_checkpoint(
                    conn,
                    run,
                    name,
                    start_after=batch[-1][0],
                    found=found,
                    scope=scope.bucket,
                    age_floor=age_floor,
                    inventory_phase=LEFTOVERS,
                )
            result.pages += 1
        phase, after = LACKING, ""
    lacking = db.query("inventory/select_lacking_keys", {"after": after})
    for batch in batches(lacking, BATCH):
        found = Findings()
        owned = [
            (key, o[0])
            for (key,) in batch
            if (o := scope.owner(key)) is not None and isinstance(o[0], KeySource) and scope.within(o[1])
        ]
        if owned:  # written since the report was taken, or really missing: the store says which
            present = object_stats(s3, scope.bucket, [k for k, _ in owned])
            found.missing = [(key, source.name) for key, source in owned if key not in present]
        with conn.transaction():
            record_batch(conn, run, scope, name, found, result, cutoff, passes)
            advance_checkpoint(
                conn, run, name, start_after=batch[-1][0], found=found, scope=scope.bucket, inventory_phase=LACKING
            )
        result.pages += 1
    result.keys_checked = db.count("inventory/count_inventory_keys")
    # the report's keys some row forms: considered and accounted for without a look at the live database
    matched = db.count("inventory/count_matched_keys")
    result.accounted += matched
    with conn.transaction():
        advance_checkpoint(
            conn,
            run,
            name,
            start_after="",
            found=Findings(considered=matched, accounted=matched),
            keys=result.keys_checked,
            done=True,
            scope=scope.bucket,
            inventory_phase=LACKING,
        )
    return result


def done_parts(conn: psycopg.Connection, run: RunRef, names: Iterable[str]) -> set[str]:
    """The parts among `names` that this run has done (a retried task skips them)."""
    rows = conn.execute(queries.load("reconcile/select_done_parts"), {"run_id": run.run_id, "shards": list(names)})
    return {r[0] for r in rows}


def write_parts(
    conn: psycopg.Connection,
    inventory_s3: ObjectStore,
    scope: Scope,
    manifest: str,
    directory: Path,
    *,
    reference_time: datetime | None,
    max_age_hours: float,
    memory_limit: str,
    part_rows: int,
    read: psycopg.Connection | None = None,
) -> tuple[Report, list[tuple[int, int]]]:
    """Read the report at `manifest` (checked, as `locate` checks it) and every key the scope's rows form, and write
    both once into Parquet part files by hash under `directory/parts` (`Engine.write_parts`), about `part_rows`
    report keys a part. Returns the report and each part's (report keys, formed keys). The formed keys are read
    on `read` (a read replica, `blobgc.core.replica`; by default `conn`): a key the replica does not form yet is
    checked against the primary before it is judged (`classify`), and again in the deleting transaction."""
    report = read_located(inventory_s3, manifest, scope.bucket)
    report.check_age(reference_time or datetime.now(UTC), max_age_hours)
    with engine(directory / "duckdb", memory_limit=memory_limit) as db:
        paths = download(inventory_s3, report, directory / "files")
        rows = db.load_inventory(report, paths)
        for path in paths:
            path.unlink()
        parts = max(1, math.ceil(rows / part_rows))
        accounted = copy_accounted(conn if read is None else read, db, scope, directory)
        counts = db.write_parts(directory / "parts", parts)
    log.info(
        "%s: %d inventory keys (%s, taken %s) against %d keys the rows form, written in %d part(s)",
        scope.bucket,
        rows,
        report.location,
        report.created.isoformat(),
        accounted,
        parts,
    )
    return report, counts


def part_files(directory: Path, p: int) -> tuple[list[Path], list[Path]]:
    """Part `p`'s Parquet files of each side, below `directory` (`Engine.write_parts`'s layout)."""
    return tuple(  # type: ignore[return-value]
        sorted((directory / part_folder(side, p)).glob("*.parquet")) for side in PART_SIDES
    )


def reconcile_part_files(
    conn: psycopg.Connection,
    s3: ObjectStore,
    run: RunRef,
    scope: Scope,
    directory: Path,
    name: str,
    p: int,
    expected: tuple[int, int],
    *,
    cutoff: datetime,
    passes: Passes,
    memory_limit: str,
    threads: int | None = None,
) -> ShardResult:
    """Anti-join part `p` (named `name`) from its files below `directory`, which must hold `expected` keys, with
    DuckDB on `threads` threads (None: one per core)."""
    with engine(directory / f"duckdb-{p}", memory_limit=memory_limit, threads=threads) as db:
        memory, used = db.settings()
        log.info("%s: joined by DuckDB on %d thread(s), memory limit %s", name, used, memory)
        db.open_part(*part_files(directory, p), expected)
        return reconcile_part(conn, s3, db, run, scope, name, cutoff, passes, judged_age(run, cutoff))


def reconcile_from_inventory(
    conn: psycopg.Connection,
    s3: ObjectStore,
    inventory_s3,
    run: RunRef,
    scope: Scope,
    manifest: str,
    *,
    cutoff: datetime,
    max_age_hours: float,
    confirmations: int,
    workdir: Path | None = None,
    memory_limit: str = "1GB",
    part_rows: int = PART_ROWS,
    read: psycopg.Connection | None = None,
) -> ShardResult:
    """Reconcile one bucket from the report at `manifest` (`s3://`, `gs://` or `az://` location of its manifest, as
    `locate` gave it) in this process, part after part, on this machine's disk (a DAG spreads the parts over mapped
    tasks instead: `prepare_parts`, `reconcile_inventory_part`), planning the orphans found on `confirmations` real
    runs in a row (`sightings`).

    `inventory_s3` reads the report's bucket; `s3` asks the reconciled bucket about missing objects.
    """
    check_age_floor(run, cutoff)
    passes = start_pass(conn, run, confirmations)
    result = ShardResult(f"inventory of {scope.bucket}")
    with tempfile.TemporaryDirectory(prefix="blobgc-inventory-", dir=workdir) as scratch_dir:
        scratch = Path(scratch_dir)
        _, counts = write_parts(
            conn,
            inventory_s3,
            scope,
            manifest,
            scratch,
            reference_time=run.reference_time,
            max_age_hours=max_age_hours,
            memory_limit=memory_limit,
            part_rows=part_rows,
            read=read,
        )
        parts = len(counts)
        names = [part_name(scope.bucket, p, parts, manifest) for p in range(parts)]
        done = done_parts(conn, run, names)
        for p, expected in enumerate(counts):
            if names[p] in done:
                continue
            part = reconcile_part_files(
                conn,
                s3,
                run,
                scope,
                scratch / "parts",
                names[p],
                p,
                expected,
                cutoff=cutoff,
                passes=passes,
                memory_limit=memory_limit,
            )
            for total in TOTALS:
                setattr(result, total, getattr(result, total) + getattr(part, total))
            result.waiting_sample += part.waiting_sample[: WAITING_SAMPLE - len(result.waiting_sample)]
            result.pages += 1
    log_bucket_result(scope, run, result, confirmations)
    return result


def prepare_parts(
    conn: psycopg.Connection,
    inventory_s3: ObjectStore,
    run: RunRef,
    scope: Scope,
    manifest: str,
    *,
    scratch: Location,
    max_age_hours: float,
    workdir: Path | None = None,
    memory_limit: str = "1GB",
    part_rows: int = PART_ROWS,
    read: psycopg.Connection | None = None,
) -> list[Shard]:
    """A DAG's inventory reconcile of one bucket, first step: write the report's keys and the formed keys once into
    part files by hash (`write_parts`) and put them under the run's folder of the `scratch` location, where every
    worker reads them; returns one shard per part, each reconciled by a mapped task (`reconcile_inventory_part`)."""
    folder = run_folder(scratch, run.dag_id, run.run_id).below(scope.bucket)
    with tempfile.TemporaryDirectory(prefix="blobgc-inventory-", dir=workdir) as scratch_dir:
        local = Path(scratch_dir)
        _, counts = write_parts(
            conn,
            inventory_s3,
            scope,
            manifest,
            local,
            reference_time=run.reference_time,
            max_age_hours=max_age_hours,
            memory_limit=memory_limit,
            part_rows=part_rows,
            read=read,
        )
        delete_tree(inventory_s3, folder)  # a retry's parts may be fewer: none of the last try's is left
        put = put_tree(inventory_s3, local / "parts", folder)
    log.info("%s: %d part files (%.1f MB) put in %s", scope.bucket, len(counts), put / 1e6, folder)
    return [
        Shard(
            "",
            None,
            bucket=scope.bucket,
            inventory=manifest,
            part=p,
            parts=len(counts),
            scratch=str(folder),
            keys=keys,
            formed=formed,
        )
        for p, (keys, formed) in enumerate(counts)
    ]


def reconcile_inventory_part(
    conn: psycopg.Connection,
    s3: ObjectStore,
    scratch_store: ObjectStore,
    run: RunRef,
    scope: Scope,
    shard: Shard,
    *,
    cutoff: datetime,
    confirmations: int,
    workdir: Path | None = None,
    memory_limit: str = "1GB",
    threads: int | None = None,
) -> ShardResult:
    """A DAG's inventory reconcile, one part (`prepare_parts`'s shard): fetch its files from the scratch location,
    anti-join them and check the leftovers live (`reconcile_part`), then delete its files. A retried part resumes
    after its checkpoint; a part already done is skipped. `threads`: DuckDB's threads for the join (None: one per
    core of the worker; a worker running several parts at once should give each its share)."""
    check_age_floor(run, cutoff)
    name = part_name(scope.bucket, shard.part, shard.parts, shard.inventory)
    folder = Location.parse(shard.scratch, origin="the shard's scratch folder")
    mine = {side: folder.below(part_folder(side, shard.part)) for side in PART_SIDES}
    result = ShardResult(name)
    if name in done_parts(conn, run, [name]):
        log.info("%s was already reconciled by this run", name)
    else:
        passes = start_pass(conn, run, confirmations)
        with tempfile.TemporaryDirectory(prefix="blobgc-inventory-part-", dir=workdir) as part_dir:
            local = Path(part_dir)
            for side, where in mine.items():
                fetch_tree(scratch_store, where, local / "parts" / part_folder(side, shard.part))
            result = reconcile_part_files(
                conn,
                s3,
                run,
                scope,
                local / "parts",
                name,
                shard.part,
                (shard.keys, shard.formed),
                cutoff=cutoff,
                passes=passes,
                memory_limit=memory_limit,
                threads=threads,
            )
    for where in mine.values():  # done (recorded): its files are needed no more
        delete_tree(scratch_store, where)
    return result


def log_bucket_result(scope: Scope, run: RunRef, result: ShardResult, confirmations: int) -> None:
    log.info(
        "%s from its inventory: %d keys in %d part(s), %d accounted for by rows; %d orphans (%d bytes) %s, "
        "%d seen orphaned on fewer than %d real runs in a row, waiting for confirmation%s, "
        "%d too young to judge, %d of unknown layout, %d rows missing their object",
        scope.bucket,
        result.keys_checked,
        result.pages,
        result.accounted,
        result.orphans,
        result.orphan_bytes,
        "would go" if run.dry_run else "owed",
        result.waiting,
        confirmations,
        f" (e.g. {', '.join(result.waiting_sample)})" if result.waiting_sample else "",
        result.too_young,
        result.unknown_keys,
        result.missing_objects,
    )


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
    """The newest usable report of `bucket` (Variable blobgc_inventory names its destination), checked for age.

    The destination's scheme says whose format is written there: `s3://` S3 Inventory, `gs://` GCS Storage Insights
    (`blobgc.core.inventory_gcs`), `az://` Azure Blob Inventory (`blobgc.core.inventory_azure`). Each is read
    through `inventory_s3`, the store of the destination's bucket or container."""
    if bucket not in destinations:
        raise InventoryError(
            f"source=inventory, but Variable blobgc_inventory names no inventory destination for "
            f"bucket {bucket} (it names {', '.join(sorted(destinations)) or 'none'})"
        )
    destination = Destination.parse(destinations[bucket], source_bucket=bucket)
    finders = {"s3": find_report, "gs": inventory_gcs.find_report, "az": inventory_azure.find_report}
    report = finders[destination.scheme](inventory_s3, destination, bucket)
    report.check_age(reference_time or datetime.now(UTC), max_age_hours)
    return report


def read_located(inventory_s3: ObjectStore, location: str, bucket: str) -> Report:
    """The report at `location` (as `locate` gave it: its manifest's `s3://`, `gs://` or `az://` URL), read and
    checked again against `bucket`, as the run that found it did."""
    if location.startswith("gs://"):
        return inventory_gcs.read_at(inventory_s3, location, bucket)
    if location.startswith("az://"):
        return inventory_azure.read_at(inventory_s3, location, bucket)
    where = Destination.parse(location.rsplit("/", 1)[0], source_bucket=bucket)
    return read_manifest(
        inventory_s3,
        where.bucket,
        f"{where.prefix}manifest.json",
        source_bucket=bucket,
        configuration=where.prefix.rstrip("/").split("/")[-2],
    )
