#!/usr/bin/env python3
"""Benchmark reconcile from S3 Inventory against the local stack (`make up; source .blobgc/env`).

Three parts, each skipped when its size is 0. Every figure is measured in this run.

1. **Inventory reconcile at scale** (`--objects`, default 10,000,000; `--format csv|parquet|both`).
   Data: N rows in `app.content` (seed 002, hashes made in SQL) and an inventory report of about N
   objects `pastes/{sha256}`, all 30 days old, written in AWS's format by `blobgc.inventory.write_report`
   from a DuckDB query that forms the keys itself, into a fresh inventory bucket on the local S3 server
   (setup: printed, not counted). 1% of the objects have no row (orphans, hashes of another seed) and
   `--missing` rows (default 1,000, not 1%) have no object. The source bucket holds the orphans' objects
   and nothing else (stored with the bulk loader): the rows the report lacks are asked of the store
   (`object_stats`: a listing where the keys are dense, a HEAD each where sparse, as they are here and in
   any real bucket), so they are kept few: at 1% of 10M that would be 100,000 HEADs. The orphans are not
   asked of the store by reconcile: the drain does that just before deleting. Timed, in a child process
   (its peak RSS is VmHWM): one dry run of `reconcile_from_inventory`, i.e. the whole reconcile but the
   deletes: download and check the data files, load them into DuckDB, COPY every formed key out of
   PostgreSQL, the hash-partitioned anti-join, the live check of the leftovers, the store's answer for the
   rows without an object, the recording. A per-phase breakdown (time, and peak RSS sampled every 0.1 s)
   comes from wrapping the module's functions in the child, and the S3 requests are counted. Goals
   (issue): 10M objects against 10M rows in at most 120 s, peak RSS at most 1.5 GiB.
   Baseline, same run: listing-based reconcile (`reconcile_shard` over `discover_shards`, shard after
   shard, as bench/reconcile.py) of `--sample` real objects (default 200,000, stored with the local S3
   server's bulk loader, 99% with a row); the ratio of the two throughputs is printed.
2. **Anti-join alone** (`--antijoin`, default 100,000,000): N inventory keys and N accounted keys (1%
   differ on each side) made directly in DuckDB (`blobgc.core.inventory_reports.Engine`, memory_limit 1GB, in a
   scratch directory under `--workdir`), each side written once into Parquet part files by hash
   (`Engine.write_parts`, `PART_ROWS` inventory keys a part), then each part alone, as a mapped task does it: a
   fresh DuckDB on that part's files (`Engine.open_part`) and reconcile_part's three statements
   (blobgc/sql/inventory/), every leftover fetched and counted. Each size in a child process, at N/10 and at N,
   so the growth over x10 keys is measured (of the parts alone, of part files and parts, and of everything with the
   load); peak RSS, the part files' size (per million keys), the scratch directory at its peak (sampled), and
   projections to 1B keys, linear and at the measured growth.
3. **Parallel listing** (`--listing-objects`, default 200,000; `--ranges 1,2,4`): that many real objects in
   one seed source shard (`pastes/0...`, the next character 0-9a-f), rows for 99%; for each R, the shard is
   cut with `split_shard` into R ranges, reconciled by R worker processes at once (each with its own
   PostgreSQL connection and S3 client, as Celery workers), a dry run each; keys/s and speed-up vs R=1.

    python bench/reconcile_inventory.py --format both            # everything, at the defaults
    python bench/reconcile_inventory.py --objects 200000 --antijoin 1000000 --listing-objects 20000 \\
        --sample 20000                                            # a quick look
    python bench/reconcile_inventory.py --antijoin 0 --listing-objects 0   # part 1 only

The script uses a database of its own (`blobgc_bench_inventory`, made with bench_database.fresh_database)
and buckets named `bench-inv-*`, and removes them all when it ends. The last line printed is JSON.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import bench_database
from bench_database import fresh_database, timed
from paste_expiry import bulk_put

import psycopg  # noqa: E402
from psycopg.conninfo import make_conninfo  # noqa: E402

from blobgc.collectors.reconcile.from_inventory import PART_ROWS  # noqa: E402
from blobgc.collectors.reconcile.listing import reconcile_shard  # noqa: E402
from blobgc.collectors.reconcile.shards import discover_shards, split_shard  # noqa: E402
from blobgc.core.clients import pg_connect, require_env, s3_client_from_env  # noqa: E402
from blobgc.core.inventory_reports import Destination  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402

# A database of its own: the other benchmarks drop and recreate blobgc_bench.
bench_database.BENCH_DB = "blobgc_bench_inventory"
DAG = "blobgc_reconcile"
GOAL_SECONDS, GOAL_RSS_MB = 120, 1.5 * 1024  # 10M objects against 10M rows; 1.5 GiB
OBJECT_AGE = timedelta(days=30)
MIN_AGE = timedelta(hours=24)  # the run's min_age_hours
MEMORY_LIMIT = "1GB"  # reconcile_from_inventory's default
CONTENT = "encode(sha256(('{seed}' || g)::bytea), 'hex')"  # PostgreSQL; DuckDB: sha256('{seed}' || g), same hex


# ------------------------------------------------------------------------------------------ helpers
def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that over from the parent across exec."""
    return status_kb("VmHWM") / 1024


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def tree_bytes(directory: Path) -> int:
    """Bytes allocated under `directory` (files come and go while it is walked)."""
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


class Sampler:
    """Samples this process's RSS (and a directory's size) every `interval` s, keeping each phase's peak."""

    def __init__(self, directory: Path | None = None, interval: float = 0.1) -> None:
        self.directory, self.interval = directory, interval
        self.phase = "setup"
        self.rss_mb: dict[str, float] = defaultdict(float)
        self.disk_bytes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.ticks = 0

    def run(self) -> None:
        while not self.stop.is_set():
            rss = status_kb("VmRSS") / 1024
            self.rss_mb[self.phase] = max(self.rss_mb[self.phase], rss)
            if self.directory is not None and self.ticks % 5 == 0:  # the walk is cheap, but not free
                self.disk_bytes = max(self.disk_bytes, tree_bytes(self.directory))
            self.ticks += 1
            self.stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        self.thread.join()


def drop_database() -> None:
    admin = make_conninfo(require_env("BLOBGC_PG_DSN"), dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{bench_database.BENCH_DB}" WITH (FORCE)')


def new_bucket(s3, role: str) -> str:
    name = f"bench-inv-{role}-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    return name


def remove_bucket(s3, bucket: str) -> None:
    """Empty the bucket (DeleteObjects, 1000 keys a call, 4 in flight) and delete it."""
    def delete(keys: list[str]) -> None:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})

    with ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(delete, keys) for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                 if (keys := [o["Key"] for o in page.get("Contents") or []])]
        for call in calls:
            call.result()
    s3.delete_bucket(Bucket=bucket)


def run_child(*args: str) -> dict:
    """Run this script as a child process (`--child ...`); its last stdout line is its JSON result."""
    child = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    if child.returncode != 0:
        sys.stderr.write(child.stderr)
        raise RuntimeError(f"child {args[0]} failed with exit code {child.returncode}")
    return json.loads(child.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------- listing data (parts 1, 3)
def listing_data(dsn: str, bucket: str, n: int, *, one_shard: bool) -> dict:
    """n real objects `pastes/{hash}` (30 days old) and a row for every one but each 100th (the orphans).
    `one_shard`: every hash starts with 0, so the bucket is the single shard pastes/0 (next character 0-9a-f)."""
    digest = CONTENT.format(seed="l")
    if one_shard:
        digest = f"'0' || substr({digest}, 2)"
    conn = pg_connect(dsn)
    hashes = [h for (h,) in conn.execute(f"SELECT {digest} FROM generate_series(1, %s) g", (n,))]
    with conn.transaction():
        conn.execute("INSERT INTO app.content (content_hash, ref_count, size_bytes) "
                     "SELECT h, 1, 100 FROM unnest(%s::text[]) WITH ORDINALITY AS x(h, o) WHERE o %% 100 <> 0",
                     (hashes,))
    conn.execute("VACUUM ANALYZE app.content")
    conn.close()
    chunks = [hashes[start:start + 20_000] for start in range(0, n, 20_000)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda chunk: bulk_put(bucket, [(f"pastes/{h}", 100) for h in chunk],
                                             age_seconds=int(OBJECT_AGE.total_seconds())), chunks))
    return {"objects": n, "rows": n - n // 100, "orphans": n // 100}


def listing_baseline(n: int) -> dict:
    """Part 1's baseline: listing-based reconcile of n objects, every shard one after another in this process."""
    print(f"baseline: listing reconcile of {n:,} objects ...", flush=True)
    dsn = fresh_database()
    s3 = s3_client_from_env()
    bucket = new_bucket(s3, "list")
    try:
        seconds, data = timed(lambda: listing_data(dsn, bucket, n, one_shard=False))
        print(f"  setup: {n:,} objects stored and {data['rows']:,} rows inserted in {seconds:.1f}s", flush=True)
        conn = pg_connect(dsn)
        run = ensure_run(conn, RunRef(DAG, f"bench-list-{uuid.uuid4().hex[:8]}", dry_run=True))
        cutoff = run.reference_time - MIN_AGE
        started = time.perf_counter()
        shards = discover_shards(s3, bucket, conn=conn)
        results = [reconcile_shard(conn, s3, run, shard, bucket=bucket, confirmations=1, cutoff=cutoff)
                   for shard in shards]
        seconds = time.perf_counter() - started
        conn.close()
    finally:
        remove_bucket(s3, bucket)
    keys, orphans = sum(r.keys_checked for r in results), sum(r.orphans for r in results)
    assert keys == n and orphans == data["orphans"], (keys, orphans, data)
    out = {"objects": n, "shards": len(shards), "seconds": seconds, "keys_per_s": keys / seconds, "orphans": orphans,
           "missing": sum(r.missing_objects for r in results)}
    print(f"  {len(shards)} shards, {keys:,} keys in {seconds:.1f}s = {out['keys_per_s']:,.0f} keys/s; "
          f"{orphans:,} orphans", flush=True)
    return out


# ------------------------------------------------------------------------------- part 1: inventory at scale
def inventory_rows(dsn: str, n: int) -> float:
    """n content rows, inserted in key order (the primary key is then built at its end, not at random)."""
    conn = pg_connect(dsn, autocommit=True)
    conn.execute("SET work_mem = '1GB'")
    seconds, _ = timed(lambda: conn.execute(
        f"INSERT INTO app.content (content_hash, ref_count, size_bytes) "
        f"SELECT h, 1, 100 FROM (SELECT {CONTENT.format(seed='c')} AS h FROM generate_series(1, %s) g) x "
        f"ORDER BY h COLLATE \"C\"", (n,)))
    vacuum_s, _ = timed(lambda: conn.execute("VACUUM ANALYZE app.content"))
    conn.close()
    return seconds + vacuum_s


def orphan_objects(bucket: str, orphans: int) -> None:
    """The orphans' objects (the report's keys of seed 'o'), 30 days old, as in the bucket the report lists."""
    keys = [f"pastes/{hashlib.sha256(f'o{g}'.encode()).hexdigest()}" for g in range(1, orphans + 1)]
    chunks = [keys[start:start + 20_000] for start in range(0, len(keys), 20_000)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda chunk: bulk_put(bucket, [(k, 100) for k in chunk],
                                             age_seconds=int(OBJECT_AGE.total_seconds())), chunks))


def write_inventory(s3, source: str, destination: Destination, n: int, orphans: int, missing: int,
                    file_format: str, workdir: Path, seed: str = "c", rows_per_file: int | None = None
                    ) -> tuple[str, int]:
    """The report: content rows `missing`+1..n (rows 1..missing have no object) and `orphans` keys of no row (the
    rows' hashes are of `seed` || g, as `inventory_rows` makes them)."""
    import duckdb

    from blobgc.inventory import write_report

    modified = (datetime.now(timezone.utc) - OBJECT_AGE).strftime("%Y-%m-%d %H:%M:%S")
    columns = f"100::BIGINT AS size, TIMESTAMP '{modified}' AS last_modified, '{'0' * 32}' AS e_tag"
    directory = workdir / f"report-{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    db = duckdb.connect(str(directory / "objects.duckdb"))
    try:
        db.execute("SET memory_limit = '4GB'")
        db.execute(f"""CREATE TABLE objects AS
                       SELECT 'pastes/' || sha256('{seed}' || g) AS key, {columns}
                       FROM range({missing + 1}, {n + 1}) t(g)
                       UNION ALL
                       SELECT 'pastes/' || sha256('o' || g) AS key, {columns} FROM range(1, {orphans + 1}) t(g)""")
        count = db.execute("SELECT count(*) FROM objects").fetchone()[0]
        manifest = write_report(s3, source, destination, db, "SELECT * FROM objects", file_format=file_format,
                                workdir=directory, **({"rows_per_file": rows_per_file} if rows_per_file else {}))
    finally:
        db.close()
        shutil.rmtree(directory, ignore_errors=True)
    return manifest, count


PHASES = (  # (phase, what it is) in the order they run; "anti-join" is DuckDB's time fetching the two joins' rows
    ("locate", "find the newest report and check its manifest (the plan task; not in the total)"),
    ("manifest", "read and check the manifest again"),
    ("download", "fetch the data files, MD5 each"),
    ("load", "data files into DuckDB table inventory"),
    ("done parts", "checkpoints already done"),
    ("COPY: PostgreSQL", "COPY ... TO STDOUT of every formed key, into a CSV file"),
    ("COPY: DuckDB load", "that CSV into DuckDB table accounted"),
    ("anti-join", "DuckDB: both anti-joins of each part (ORDER BY key), every row fetched"),
    ("live check", "classify: one query per 1000 leftovers"),
    ("missing: store", "object_stats on the keys the report lacks"),
    ("record", "record_batch and advance_checkpoint, a transaction per 1000 keys"),
    ("part: other", "each part's count(*), commit, batching"),
    ("other", "scratch directory, engine, clean-up"),
)


def inventory_child(dsn: str, bucket: str, destinations: str, workdir: str, run_id: str) -> int:
    """One timed dry run of reconcile_from_inventory, its phases timed by wrapping the module's functions."""
    import blobgc.collectors.reconcile.from_inventory as inventory
    from blobgc.core.inventory_reports import Engine

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    phases: dict[str, float] = defaultdict(float)
    part_seconds: list[float] = []
    sampler = Sampler(Path(workdir))

    def phase(name: str, fn):
        def wrapper(*args, **kwargs):
            before, started = sampler.phase, time.perf_counter()
            sampler.phase = name
            try:
                return fn(*args, **kwargs)
            finally:
                phases[name] += time.perf_counter() - started
                sampler.phase = before
        return wrapper

    def timed_query(self, statement, parameters=None):  # DuckDB's time only, not the caller's between fetches
        rows = original_query(self, statement, parameters)
        while True:
            before, started = sampler.phase, time.perf_counter()
            sampler.phase = "anti-join"
            try:
                row = next(rows)
            except StopIteration:
                return
            finally:
                phases["anti-join"] += time.perf_counter() - started
                sampler.phase = before
            yield row

    def reconcile_part(*args, **kwargs):
        seconds, part = timed(lambda: original_reconcile_part(*args, **kwargs))
        part_seconds.append(seconds)
        return part

    original_query, original_reconcile_part = Engine.query, inventory.reconcile_part
    Engine.query = timed_query
    Engine.load_inventory = phase("load", Engine.load_inventory)
    Engine.load_accounted = phase("COPY: DuckDB load", Engine.load_accounted)
    inventory.read_manifest = phase("manifest", inventory.read_manifest)
    inventory.download = phase("download", inventory.download)
    inventory.done_parts = phase("done parts", inventory.done_parts)
    inventory.copy_accounted = phase("COPY", inventory.copy_accounted)
    inventory.reconcile_part = phase("part", reconcile_part)
    inventory.classify = phase("live check", inventory.classify)
    inventory.object_stats = phase("missing: store", inventory.object_stats)
    inventory.record_batch = phase("record", inventory.record_batch)
    inventory.advance_checkpoint = phase("record", inventory.advance_checkpoint)

    conn, s3 = pg_connect(dsn), s3_client_from_env()
    calls: dict[str, int] = defaultdict(int)  # S3 requests made by the reconcile, and keys listed

    def count_call(**kwargs) -> None:
        calls[kwargs["model"].name] += 1

    def count_listed(**kwargs) -> None:
        calls["keys listed"] += len(kwargs["parsed"].get("Contents") or [])

    run = ensure_run(conn, RunRef(DAG, run_id, dry_run=True))
    cutoff = run.reference_time - MIN_AGE
    with sampler:
        locate_s, report = timed(lambda: inventory.locate(s3, json.loads(destinations), bucket, run.reference_time,
                                                          48))
        scope = next(s for s in inventory.scopes(conn, bucket, [], seeds=True, prefixes=None) if s.bucket == bucket)
        rss_before = status_kb("VmRSS") / 1024
        sampler.phase = "other"
        s3.meta.events.register("before-call.s3", count_call)
        s3.meta.events.register("after-call.s3.ListObjectsV2", count_listed)
        seconds, result = timed(lambda: inventory.reconcile_from_inventory(
            conn, s3, s3, run, scope, report.location, confirmations=1, cutoff=cutoff, max_age_hours=48,
            workdir=Path(workdir), memory_limit=MEMORY_LIMIT))
    conn.close()
    breakdown = {
        "locate": locate_s, "manifest": phases["manifest"], "download": phases["download"], "load": phases["load"],
        "done parts": phases["done parts"], "COPY: PostgreSQL": phases["COPY"] - phases["COPY: DuckDB load"],
        "COPY: DuckDB load": phases["COPY: DuckDB load"], "anti-join": phases["anti-join"],
        "live check": phases["live check"], "missing: store": phases["missing: store"], "record": phases["record"]}
    breakdown["part: other"] = (phases["part"] - phases["anti-join"] - phases["live check"]
                                - phases["missing: store"] - phases["record"])
    breakdown["other"] = seconds - sum(v for k, v in breakdown.items() if k != "locate")
    rss = dict(sampler.rss_mb)
    rss["COPY: PostgreSQL"] = rss.pop("COPY", 0.0)
    rss["part: other"] = rss.pop("part", 0.0)
    print(json.dumps({
        "seconds": seconds, "keys": result.keys_checked, "parts": result.pages, "orphans": result.orphans,
        "missing": result.missing_objects, "unknown": result.unknown_keys, "young": result.too_young,
        "keys_per_s": result.keys_checked / seconds, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss_before,
        "phases": breakdown, "phase_rss_mb": rss, "part_seconds": part_seconds,
        "scratch_peak_bytes": sampler.disk_bytes, "report_files": len(report.files), "s3_calls": dict(calls),
        "report_bytes": sum(f.size or 0 for f in report.files)}))
    return 0


def inventory_at_scale(n: int, formats: list[str], missing: int, workdir: Path) -> list[dict]:
    orphans = n // 100
    print(f"inventory reconcile: {n:,} rows; report of {n - missing + orphans:,} objects ({orphans:,} orphans), "
          f"{missing:,} rows without an object ...", flush=True)
    dsn = fresh_database()
    s3 = s3_client_from_env()
    source, reports = new_bucket(s3, "src"), new_bucket(s3, "reports")
    results = []
    try:
        seconds = inventory_rows(dsn, n)
        print(f"  setup: {n:,} content rows in {seconds:.1f}s", flush=True)
        seconds, _ = timed(lambda: orphan_objects(source, orphans))
        print(f"  setup: the {orphans:,} orphans' objects stored in the source bucket in {seconds:.1f}s", flush=True)
        for file_format in formats:
            destination = Destination(reports, f"{file_format}/")
            seconds, (manifest, count) = timed(lambda: write_inventory(s3, source, destination, n, orphans, missing,
                                                                       file_format, workdir))
            print(f"  setup: {file_format} report of {count:,} objects written in {seconds:.1f}s", flush=True)
            print(f"  {file_format}: reconcile_from_inventory, dry run (child process) ...", flush=True)
            out = run_child("inventory", dsn, source, json.dumps({source: f"s3://{reports}/{file_format}"}),
                            str(workdir), f"bench-inv-{file_format}-{uuid.uuid4().hex[:8]}")
            assert out["keys"] == count, (out, count)
            assert out["orphans"] == orphans, f"{out['orphans']} orphans found, {orphans} planted"
            assert out["missing"] == missing, f"{out['missing']} missing objects found, {missing} planted"
            assert out["unknown"] == 0 and out["young"] == 0, out
            out.update(format=file_format, rows=n, objects=count, planted_orphans=orphans, planted_missing=missing,
                       report_write_s=seconds,
                       passed={"seconds": out["seconds"] <= GOAL_SECONDS, "rss": out["peak_rss_mb"] <= GOAL_RSS_MB})
            print(f"  {file_format}: {out['keys']:,} keys in {out['seconds']:.1f}s = {out['keys_per_s']:,.0f} keys/s, "
                  f"peak RSS {out['peak_rss_mb']:,.0f} MB", flush=True)
            results.append(out)
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=reports, Prefix=f"{file_format}/"):
                for item in page.get("Contents") or []:
                    s3.delete_object(Bucket=reports, Key=item["Key"])  # free the server's memory
    finally:
        remove_bucket(s3, source)
        remove_bucket(s3, reports)
    return results


# ---------------------------------------------------------------------------------- part 2: anti-join alone
# reconcile_part's three statements (blobgc/sql/inventory/, as collectors/reconcile/from_inventory.py runs them):
# the part's hash bucket bound as parameters, `after` "" (a part from its start).


def antijoin_child(n: str, workdir: str) -> int:
    from blobgc.collectors.reconcile.from_inventory import part_files
    from blobgc.core.inventory_reports import Engine

    n_keys = int(n)
    directory = Path(workdir) / f"antijoin-{uuid.uuid4().hex[:8]}"
    sampler = Sampler(directory)
    out: dict = {"n": n_keys}
    with sampler:
        db = Engine(directory / "duckdb", memory_limit=MEMORY_LIMIT)
        try:
            sampler.phase = "load"
            out["load_s"], _ = timed(lambda: (
                db.db.execute(f"""CREATE TABLE inventory AS
                                  SELECT key, 100::BIGINT AS size, 0::BIGINT AS modified_ms, hash(key) AS h
                                  FROM (SELECT 'pastes/' || sha256('c' || g) AS key FROM range(1, {n_keys + 1}) t(g))"""),
                db.db.execute(f"""CREATE TABLE accounted AS
                                  SELECT key, true AS required, hash(key) AS h
                                  FROM (SELECT 'pastes/' || sha256(CASE WHEN g % 100 = 0 THEN 'x' ELSE 'c' END || g)
                                               AS key FROM range(1, {n_keys + 1}) t(g))"""),
                db.db.execute("CHECKPOINT")))
            out["disk_after_load_bytes"] = tree_bytes(directory)
            parts = out["parts"] = max(1, math.ceil(n_keys / PART_ROWS))
            sampler.phase = "part files"
            out["write_parts_s"], counts = timed(lambda: db.write_parts(directory / "parts", parts))
            out["part_files_bytes"] = tree_bytes(directory / "parts")
        finally:
            db.close()
        shutil.rmtree(directory / "duckdb", ignore_errors=True)  # what the mapped parts need is the part files
        try:
            sampler.phase = "anti-join"
            per_part, keys, leftovers, lacking = [], 0, 0, 0
            started = time.perf_counter()
            for p in range(parts):  # as each mapped task does, on its own part's files
                part_started = time.perf_counter()
                part_db = Engine(directory / f"duckdb-{p}", memory_limit=MEMORY_LIMIT)
                try:
                    part_db.open_part(*part_files(directory / "parts", p), counts[p])
                    leftovers += sum(1 for _ in part_db.query("inventory/select_leftover_keys", {"after": ""}))
                    lacking += sum(1 for _ in part_db.query("inventory/select_lacking_keys", {"after": ""}))
                    part_db.count("inventory/count_matched_keys")
                    keys += part_db.count("inventory/count_inventory_keys")
                finally:
                    part_db.close()
                    shutil.rmtree(directory / f"duckdb-{p}", ignore_errors=True)
                per_part.append(time.perf_counter() - part_started)
            out.update(seconds=time.perf_counter() - started, part_seconds=per_part, keys=keys, leftovers=leftovers,
                       lacking=lacking)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    out.update(disk_peak_bytes=sampler.disk_bytes, peak_rss_mb=peak_rss_mb(), phase_rss_mb=dict(sampler.rss_mb))
    print(json.dumps(out))
    return 0


def antijoin_alone(n: int, workdir: Path) -> dict:
    """At n/10 and at n, each in a child process: the growth between the two is measured, not assumed."""
    runs = []
    for size in (n // 10, n):
        print(f"anti-join alone: {size:,} inventory keys against {size:,} accounted keys (child process) ...",
              flush=True)
        out = run_child("antijoin", str(size), str(workdir))
        assert out["keys"] == size and out["leftovers"] == size // 100 and out["lacking"] == size // 100, out
        out["join_s"] = out["write_parts_s"] + out["seconds"]  # the anti-join proper: part files, then each part
        out["total_s"] = out["load_s"] + out["join_s"]
        print(f"  load {out['load_s']:.1f}s; part files {out['write_parts_s']:.1f}s "
              f"({out['part_files_bytes'] / 1e9:.2f} GB); anti-join {out['seconds']:.1f}s in {out['parts']} parts; "
              f"peak RSS {out['peak_rss_mb']:,.0f} MB; scratch {out['disk_peak_bytes'] / 1e9:.1f} GB at its peak",
              flush=True)
        runs.append(out)
    small, big = runs
    big["small"] = small
    big["growth_x10_join"] = big["join_s"] / small["join_s"]
    big["growth_x10_total"] = big["total_s"] / small["total_s"]
    big["growth_x10"] = big["seconds"] / small["seconds"]
    big["exponent"] = math.log10(big["growth_x10"])
    big["projection_1b_linear_s"] = big["seconds"] * 1e9 / n
    big["projection_1b_measured_s"] = big["seconds"] * (1e9 / n) ** max(1.0, big["exponent"])
    return big


# ---------------------------------------------------------------------------------- part 3: parallel listing
def range_worker(dsn: str, bucket: str, run: RunRef, cutoff: datetime, shards: list, barrier, results) -> None:
    """One worker process: its own connection and client, then its ranges once every worker is ready."""
    conn, s3 = pg_connect(dsn), s3_client_from_env()
    s3.list_objects_v2(Bucket=bucket, MaxKeys=1)  # the connection pool warm, as a worker's would be
    barrier.wait()
    started = time.time()
    done = [reconcile_shard(conn, s3, run, shard, bucket=bucket, confirmations=1, cutoff=cutoff) for shard in shards]
    results.put({"started": started, "ended": time.time(), "keys": sum(r.keys_checked for r in done),
                 "orphans": sum(r.orphans for r in done), "missing": sum(r.missing_objects for r in done)})
    conn.close()


def parallel_listing(n: int, ranges: list[int]) -> dict:
    print(f"parallel listing: {n:,} objects in one shard, {', '.join(map(str, ranges))} worker process(es) ...",
          flush=True)
    dsn = fresh_database()
    s3 = s3_client_from_env()
    bucket = new_bucket(s3, "ranges")
    ctx = multiprocessing.get_context("spawn")
    out: dict = {"objects": n, "runs": []}
    try:
        seconds, data = timed(lambda: listing_data(dsn, bucket, n, one_shard=True))
        print(f"  setup: {n:,} objects stored and {data['rows']:,} rows inserted in {seconds:.1f}s", flush=True)
        conn = pg_connect(dsn)
        shards = discover_shards(s3, bucket, conn=conn)
        assert [s.prefix for s in shards] == ["pastes/0"], shards
        for r in ranges:
            run = ensure_run(conn, RunRef(DAG, f"bench-ranges-{r}-{uuid.uuid4().hex[:8]}", dry_run=True))
            split_s, parts = timed(lambda: [part for shard in shards for part in split_shard(s3, bucket, shard, r)])
            assert len(parts) == r, parts
            barrier, results = ctx.Barrier(r + 1), ctx.Queue()
            workers = [ctx.Process(target=range_worker, args=(dsn, bucket, run, run.reference_time - MIN_AGE,
                                                              [part], barrier, results)) for part in parts]
            for worker in workers:
                worker.start()
            barrier.wait(timeout=120)
            started = time.time()
            done = [results.get(timeout=3600) for _ in workers]
            wall = time.time() - started
            for worker in workers:
                worker.join()
                assert worker.exitcode == 0, worker
            keys, orphans = sum(d["keys"] for d in done), sum(d["orphans"] for d in done)
            assert keys == n and orphans == data["orphans"], (r, keys, orphans, data)
            out["runs"].append({"ranges": r, "bounds": [(p.lo, p.hi) for p in parts], "split_s": split_s,
                                "seconds": wall, "keys": keys, "keys_per_s": keys / wall, "orphans": orphans,
                                "missing": sum(d["missing"] for d in done),
                                "worker_seconds": [d["ended"] - d["started"] for d in done]})
            print(f"  R={r}: {keys:,} keys in {wall:.1f}s = {keys / wall:,.0f} keys/s; {orphans:,} orphans "
                  f"(split in {split_s * 1000:.0f} ms)", flush=True)
        conn.close()
    finally:
        remove_bucket(s3, bucket)
    return out


# ------------------------------------------------------------------------------------------------ report
def mb(value: float) -> str:
    return f"{value:,.0f} MB"


def report_inventory(results: dict) -> None:
    base = results.get("baseline")
    for r in results.get("inventory", []):
        print(f"\n## inventory reconcile, {r['format']}: {r['objects']:,} objects against {r['rows']:,} rows "
              f"(dry run, child process, memory_limit {MEMORY_LIMIT}, parts of {PART_ROWS:,})")
        print(f"report: {r['report_files']} data files, {r['report_bytes'] / 1e6:,.0f} MB; written in "
              f"{r['report_write_s']:.1f}s (setup, not counted)")
        print(f"time:        {r['seconds']:8.1f} s   goal <= {GOAL_SECONDS} s       "
              f"{'PASS' if r['passed']['seconds'] else 'FAIL'}")
        print(f"peak RSS:    {r['peak_rss_mb']:8,.0f} MB  goal <= {GOAL_RSS_MB:,.0f} MB    "
              f"{'PASS' if r['passed']['rss'] else 'FAIL'}   (before the call: {r['rss_before_mb']:,.0f} MB)")
        print(f"throughput:  {r['keys_per_s']:8,.0f} keys/s")
        if base:
            print(f"listing:     {base['keys_per_s']:8,.0f} keys/s ({base['objects']:,} objects, {base['shards']} "
                  f"shards one after another) -> inventory is {r['keys_per_s'] / base['keys_per_s']:.1f}x")
        print(f"orphans:     {r['orphans']:8,} found of {r['planted_orphans']:,} planted; missing objects "
              f"{r['missing']:,} of {r['planted_missing']:,}; {r['parts']} parts")
        print(f"scratch:     {r['scratch_peak_bytes'] / 1e6:8,.0f} MB on disk at its peak (sampled)")
        print("S3 calls:    " + ", ".join(f"{name} {count:,}" for name, count in sorted(r["s3_calls"].items())))
        print(f"{'phase':<18} {'seconds':>8} {'share':>6} {'peak RSS':>9}  what")
        for name, what in PHASES:
            seconds = r["phases"].get(name, 0.0)
            share = "" if name == "locate" else f"{seconds / r['seconds']:6.0%}"
            rss = r["phase_rss_mb"].get(name)
            print(f"{name:<18} {seconds:8.2f} {share:>6} {mb(rss) if rss else '':>9}  {what}")
        print(f"parts: {', '.join(f'{s:.1f}s' for s in r['part_seconds'])}")


def report_antijoin(results: dict) -> None:
    if "antijoin" in results:
        a = results["antijoin"]
        print(f"\n## anti-join alone: {a['n']:,} inventory keys against {a['n']:,} accounted keys, in DuckDB "
              f"(memory_limit {MEMORY_LIMIT}, {a['parts']} parts of {PART_ROWS:,}; 1% leftovers on each side)")
        print(f"load (setup): {a['load_s']:.1f}s; scratch after the load {a['disk_after_load_bytes'] / 1e9:.1f} GB, "
              f"at its peak {a['disk_peak_bytes'] / 1e9:.1f} GB (sampled)")
        print(f"anti-join:    {a['seconds']:.1f}s = {a['n'] / a['seconds']:,.0f} keys/s; parts "
              f"{min(a['part_seconds']):.1f}-{max(a['part_seconds']):.1f}s each; {a['leftovers']:,} leftovers and "
              f"{a['lacking']:,} lacking keys fetched")
        print(f"peak RSS:     {a['peak_rss_mb']:,.0f} MB (load {mb(a['phase_rss_mb'].get('load', 0))}, anti-join "
              f"{mb(a['phase_rss_mb'].get('anti-join', 0))})")
        print(f"part files:   {a['write_parts_s']:.1f}s; {a['part_files_bytes'] / 1e9:.2f} GB = "
              f"{a['part_files_bytes'] / (a['n'] / 1e6) / 1e6:.0f} MB per million keys (both sides)")
        s = a["small"]
        print(f"growth:       {s['n']:,} keys in {s['seconds']:.1f}s ({s['parts']} parts) -> {a['n']:,} in "
              f"{a['seconds']:.1f}s: x{a['growth_x10']:.1f} for x10 keys (N^{a['exponent']:.2f}); with the part "
              f"files x{a['growth_x10_join']:.1f}; load, part files and parts x{a['growth_x10_total']:.1f} "
              f"({s['total_s']:.1f}s -> {a['total_s']:.1f}s)")
        print(f"1B keys:      {a['projection_1b_linear_s'] / 60:.0f} min if linear; "
              f"{a['projection_1b_measured_s'] / 3600:.1f} h at the measured growth; scratch "
              f"~{a['disk_peak_bytes'] * 1e9 / a['n'] / 1e9:.0f} GB")


def report_parallel(results: dict) -> None:
    if "parallel" in results:
        p = results["parallel"]
        print(f"\n## parallel listing: {p['objects']:,} objects in one shard (pastes/0), split_shard into R ranges, "
              f"R worker processes")
        first = p["runs"][0]["keys_per_s"]
        print(f"{'R':>3} {'seconds':>8} {'keys/s':>9} {'speed-up':>9} {'orphans':>8}  ranges")
        for r in p["runs"]:
            bounds = ", ".join(f"[{lo[len('pastes/'):] or '…'}, {hi[len('pastes/'):] or '…'})" for lo, hi in r["bounds"])
            print(f"{r['ranges']:>3} {r['seconds']:8.1f} {r['keys_per_s']:9,.0f} {r['keys_per_s'] / first:8.2f}x "
                  f"{r['orphans']:>8,}  {bounds}")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return {"inventory": inventory_child, "antijoin": antijoin_child}[sys.argv[2]](*sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000_000, help="part 1: rows and objects (0: skip)")
    parser.add_argument("--format", choices=("csv", "parquet", "both"), default="csv")
    parser.add_argument("--missing", type=int, default=1000, help="part 1: rows without an object")
    parser.add_argument("--sample", type=int, default=200_000, help="part 1: the listing baseline's objects (0: skip)")
    parser.add_argument("--antijoin", type=int, default=100_000_000, help="part 2: keys on each side (0: skip)")
    parser.add_argument("--listing-objects", type=int, default=200_000, help="part 3: objects (0: skip)")
    parser.add_argument("--ranges", default="1,2,4", help="part 3: worker processes to try")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp"), help="scratch directories go below it")
    args = parser.parse_args()
    formats = ["csv", "parquet"] if args.format == "both" else [args.format]
    ranges = [int(r) for r in args.ranges.split(",") if r.strip()]
    workdir = Path(args.workdir) / f"blobgc-bench-inventory-{uuid.uuid4().hex[:8]}"
    workdir.mkdir(parents=True)
    results: dict = {"when": datetime.now(timezone.utc).isoformat(), "part_rows": PART_ROWS,
                     "memory_limit": MEMORY_LIMIT, "cpus": os.cpu_count()}
    try:  # each part's figures are printed as soon as it ends
        if args.objects and args.sample:
            results["baseline"] = listing_baseline(args.sample)
        if args.objects:
            results["inventory"] = inventory_at_scale(args.objects, formats, args.missing, workdir)
            report_inventory(results)
        if args.antijoin:
            results["antijoin"] = antijoin_alone(args.antijoin, workdir)
            report_antijoin(results)
        if args.listing_objects and ranges:
            results["parallel"] = parallel_listing(args.listing_objects, ranges)
            report_parallel(results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if args.objects or (args.listing_objects and ranges):  # part 2 alone needs neither PostgreSQL nor S3
            try:
                drop_database()
            except psycopg.Error as error:
                print(f"could not drop database {bench_database.BENCH_DB}: {error}", file=sys.stderr)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
