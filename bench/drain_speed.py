#!/usr/bin/env python3
"""The sweep of a collection without a `size` column, and its outbox drain, against a one-at-a-time loop (issue 34).

A collection without a `size` column owes keys of unknown size: the drain must learn which objects exist, and their
sizes, before it deletes them, or the reclaim figures would count objects that were never there. This benchmark
builds such a collection on the local stack and sweeps it through the engine's own functions, as `blobgc_sweep`'s
tasks call them (not through Airflow): mark (untimed), then, timed, plan (`plan_collection`, 2 id ranges side by
side), the gate (`judge`, `record_judgement`), execute (`execute_plan_part`, 2 parts side by side) and the drain
(`delete_owed_objects`, 2 drains side by side, as the DAG's `delete_owed_objects` task).

Data (`--rows` garbage rows, default 100,000, plus `--referenced` rows that a referencing table points at, default
30,000): `drain_bench.item(id bigint PK, sha text, created_at)`, no size column, one key template
`media/{sha}.bin`, whose keys are content hashes (64 hex characters, 74-character keys): the keys of a claim are
scattered over the whole bucket, the hard case for the drain. `--layout id` makes them `media/{id}.bin` instead.
Every object is loaded with the local S3 server's bulk loader, sizes 100..2099 bytes; 1 garbage row in 50 has no
object (never written): the drain must settle it as absent and never count it.

Measured in the same run:
1. baseline: a hand-written loop, one row at a time (one SELECT of the next unreferenced unused row, one DELETE
   of it, one HEAD and one DeleteObject of its object), over `--sample` garbage rows (default 1,000) set aside for it;
2. before: the drain as it was before issue 34 (`object_stats` asked per claim, probing each run of 1000 keys with
   a 100-key listing page and HEADing sparse runs, 32 at a time; the code is kept below as BEFORE, for this
   measurement only) over `--before-sample` owed objects (default 10,000) of a bucket of its own, same data shape;
3. now: the whole sweep of `--rows` garbage rows, plan + gate + execute + drain.

Checked, not assumed: the drain's objects and bytes equal what the bucket held for the garbage rows (the objects
that existed, their exact sizes); the absent objects are counted as absent; every referenced row's object is still
there and no garbage object is left.

    make up && source .blobgc/env && python bench/drain_speed.py
    python bench/drain_speed.py --rows 5000 --referenced 1500 --sample 200 --before-sample 2000   # a smoke test
    python bench/drain_speed.py --server-pid $(cat .blobgc/pids/s3.pid)   # also the S3 server's CPU in the drain
    DRAIN_PROFILE=cumulative python bench/drain_speed.py --rows 20000 --referenced 6000   # the drain profiled, 1 thread

The script uses a database of its own (`blobgc_bench_drain`), dropped at the end, and buckets of its own, emptied.
"""
from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import logging
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import bench_database
import psycopg
from bench_database import ROOT, drop_database, empty_bucket, fresh_database, vacuum
from paste_expiry import bulk_put

import blobgc.kinds  # noqa: E402,F401 - installs the kinds (the drain's guards)
from blobgc.collectors.mark import mark_collection  # noqa: E402
from blobgc.collectors.sweep import execute_plan_part, plan_collection, range_part  # noqa: E402
from blobgc.core import outbox as outbox_module  # noqa: E402
from blobgc.core.clients import pg_connect, s3_client_from_env  # noqa: E402
from blobgc.core.collections import bind, parse_collections  # noqa: E402
from blobgc.core.gate import GateSettings, judge, record_judgement  # noqa: E402
from blobgc.core.key_space import split_key_space  # noqa: E402
from blobgc.core.objects import ObjectStat, head_stats, key_before  # noqa: E402
from blobgc.core.outbox import delete_owed_objects, record_deletions  # noqa: E402
from blobgc.core.plans import APPROVED, PASSED, PLAN_MAX_AGE_HOURS, check_fresh, fix_plan, plan_of, require_go  # noqa: E402
from blobgc.core.references import discover_references  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402

bench_database.BENCH_DB = "blobgc_bench_drain"
SCHEMA = "drain_bench"
NAME = "drain_items"
GRACE = timedelta(hours=24)
MISSING_EVERY = 50  # 1 garbage row in 50 has no object
LOAD_CHUNK = 20_000

TABLES = f"""
CREATE SCHEMA {SCHEMA};
CREATE TABLE {SCHEMA}.item (id bigint PRIMARY KEY, sha text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE {SCHEMA}.item_use (id bigserial PRIMARY KEY,
                                item_id bigint NOT NULL REFERENCES {SCHEMA}.item (id) ON DELETE RESTRICT);
CREATE INDEX ON {SCHEMA}.item_use (item_id);
"""


def collections_yaml(bucket: str, layout: str) -> str:
    key = "media/{sha}.bin" if layout == "hash" else "media/{id}.bin"
    return f"""
collections:
  {NAME}:
    table: {SCHEMA}.item
    id: id
    created_at: created_at
    bucket: {bucket}
    keys:
      - "{key}"
    grace_hours: 24
"""


class Calls:
    """An S3 client that counts the calls the drain makes of it (every other call passes through)."""

    counted = ("list_objects_v2", "head_object", "delete_objects", "delete_object")

    def __init__(self, inner) -> None:
        self.inner, self.calls, self.lock = inner, Counter(), threading.Lock()

    def __getattr__(self, name: str):
        attr = getattr(self.inner, name)
        if name not in self.counted:
            return attr

        def call(**kwargs):
            with self.lock:
                self.calls[name] += 1
            return attr(**kwargs)

        return call


# ---------------------------------------------------------------------------------------------- the data
def sha_of(i: int) -> str:
    return hashlib.sha256(f"drain-bench-{i}".encode()).hexdigest()


def key_of(layout: str, i: int) -> str:
    return f"media/{sha_of(i)}.bin" if layout == "hash" else f"media/{i}.bin"


def size_of(i: int) -> int:
    return 100 + (i * 7919) % 2000


def load(dsn: str, s3, bucket: str, layout: str, garbage: list[int], referenced: list[int]) -> dict:
    """Rows, references, marks (3 days old) and objects; returns what the bucket holds for the garbage rows."""
    with pg_connect(dsn) as conn:
        with conn.transaction():
            conn.execute(TABLES)
        with conn.cursor() as cur:
            with cur.copy(f"COPY {SCHEMA}.item (id, sha, created_at) FROM STDIN") as copy:
                for i in sorted(garbage + referenced):
                    copy.write_row((i, sha_of(i), datetime.now(UTC) - timedelta(days=3)))
            with cur.copy(f"COPY {SCHEMA}.item_use (item_id) FROM STDIN") as copy:
                for i in referenced:
                    copy.write_row((i,))
        conn.commit()
        vacuum(conn, f"{SCHEMA}.item", f"{SCHEMA}.item_use")
    stored = [i for i in garbage if i % MISSING_EVERY] + referenced
    random.Random(34).shuffle(stored)
    for start in range(0, len(stored), LOAD_CHUNK):
        bulk_put(bucket, [(key_of(layout, i), size_of(i)) for i in stored[start : start + LOAD_CHUNK]])
    existing = [i for i in garbage if i % MISSING_EVERY]
    return {"objects": len(existing), "bytes": sum(size_of(i) for i in existing),
            "absent": len(garbage) - len(existing)}


def bound_collection(conn, bucket: str, layout: str):
    collection = parse_collections(collections_yaml(bucket, layout))[NAME]
    return bind(conn, collection, default_bucket=bucket)


def mark(dsn: str, bucket: str, layout: str) -> None:
    """The mark (untimed): every unreferenced row unused, 3 days ago."""
    with pg_connect(dsn) as conn:
        bound = bound_collection(conn, bucket, layout)
        mark_collection(conn, bound, discover_references(conn, f"{SCHEMA}.item", id_column="id"))
        with conn.transaction():
            conn.execute(f"UPDATE blobgc.mark_{NAME} SET unused_since = now() - interval '3 days'")
        vacuum(conn, f"blobgc.mark_{NAME}")


# ------------------------------------------------------------------------------------- baseline: one at a time
NEXT_ROW = f"""
SELECT i.id, i.sha FROM {SCHEMA}.item i JOIN blobgc.mark_{NAME} m ON m.id = i.id
WHERE i.id > %s AND i.id <= %s AND m.unused_since < now() - interval '24 hours'
  AND NOT EXISTS (SELECT 1 FROM {SCHEMA}.item_use u WHERE u.item_id = i.id)
ORDER BY i.id LIMIT 1
"""


def one_at_a_time(dsn: str, s3, bucket: str, layout: str, lo: int, hi: int) -> dict:
    """The hand-written loop: per row, one SELECT, one DELETE, one HEAD, one DeleteObject (autocommit)."""
    objects = bytes_ = rows = 0
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = lo
        while (row := conn.execute(NEXT_ROW, (after, hi)).fetchone()) is not None:
            row_id, sha = row
            after = row_id
            conn.execute(f"DELETE FROM {SCHEMA}.item WHERE id = %s", (row_id,))
            conn.execute(f"DELETE FROM blobgc.mark_{NAME} WHERE id = %s", (row_id,))
            rows += 1
            key = f"media/{sha}.bin" if layout == "hash" else f"media/{row_id}.bin"
            try:
                size = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
            except s3.exceptions.ClientError:
                continue
            s3.delete_object(Bucket=bucket, Key=key)
            objects += 1
            bytes_ += size
    seconds = time.perf_counter() - started
    return {"rows": rows, "objects": objects, "bytes": bytes_, "seconds": seconds, "rows_per_s": rows / seconds}


# ------------------------------------------------------------------------ before: object_stats before issue 34
def before_object_stats(client, bucket, keys, *, concurrency=32):
    """BEFORE (the code as it was): per run of 1000 sorted keys, a 100-key probe page; dense runs listed on, sparse
    runs HEADed."""
    ordered = sorted(set(keys))
    found, sparse = {}, []
    for run in [ordered[i : i + 1000] for i in range(0, len(ordered), 1000)]:
        listed, rest = before_list_dense_run(client, bucket, run)
        found.update(listed)
        sparse += rest
    if sparse:
        found.update(head_stats(client, bucket, sparse, concurrency=concurrency))
    return found


def before_list_dense_run(client, bucket, run):
    found, wanted = {}, set(run)
    i, page_size = 0, 100
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
        if hits * 5 < len(contents):
            return found, run[i:]
        page_size = 1000
    return found, []


def drain_before(dsn: str, s3, bucket: str, layout: str, rows: int, referenced: int, *, recorded: bool = False
                 ) -> dict:
    """The drain as before issue 34, over the objects of `rows` garbage rows owed in log order (the sweep's), among
    `referenced` others, in a bucket of its own; or, `recorded`, today's drain of the same keys with their sizes
    recorded (nothing to ask the store: the ceiling)."""
    ids = list(range(1, rows + referenced + 1))
    random.Random(7).shuffle(ids)
    garbage, kept = sorted(ids[:rows]), ids[rows:]
    stored = [i for i in garbage if i % MISSING_EVERY] + kept
    for start in range(0, len(stored), LOAD_CHUNK):
        bulk_put(bucket, [(key_of(layout, i), size_of(i)) for i in stored[start : start + LOAD_CHUNK]])
    calls = Calls(s3)
    with pg_connect(dsn) as conn:
        run = ensure_run(conn, RunRef("bench_drain_before", f"before-{uuid.uuid4().hex[:8]}"))
        with conn.transaction():
            for start in range(0, len(garbage), 1000):
                part = garbage[start : start + 1000]
                # recorded: the sizes of the objects that exist (an absent key is never owed with a size)
                present = [i for i in part if i % MISSING_EVERY] if recorded else part
                record_deletions(conn, run, source="bench.objects", bucket=bucket,
                                 keys=[key_of(layout, i) for i in present],
                                 sizes=[size_of(i) if recorded else None for i in present])
        saved = outbox_module.object_stats, outbox_module.ListedAhead.for_rows
        if not recorded:
            outbox_module.object_stats = before_object_stats
            outbox_module.ListedAhead.for_rows = lambda self, conn, s3, rows: {}
        try:
            started = time.perf_counter()
            drained = delete_owed_objects(conn, calls, run, workers=2, connect=lambda: pg_connect(dsn))
            seconds = time.perf_counter() - started
        finally:
            outbox_module.object_stats, outbox_module.ListedAhead.for_rows = saved
    existing = [i for i in garbage if i % MISSING_EVERY]
    assert drained.objects_deleted == len(existing), drained
    assert drained.bytes_reclaimed == sum(size_of(i) for i in existing), drained
    return {"objects": drained.objects_deleted, "absent": drained.absent, "seconds": seconds,
            "objects_per_s": drained.objects_deleted / seconds, "calls": dict(calls.calls)}


# ------------------------------------------------------------------------------------------ now: the sweep
def process_cpu(pid: int | None) -> float:
    """User and system CPU seconds of process `pid` so far (0 without one)."""
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sweep(dsn: str, s3, bucket: str, layout: str, workers: int, server_pid: int | None = None) -> dict:
    """plan (id ranges side by side), gate, execute (parts side by side), drain (2 drains): each timed."""
    calls = Calls(s3)
    out: dict = {}
    with pg_connect(dsn) as conn:
        bound = bound_collection(conn, bucket, layout)
        refs = discover_references(conn, f"{SCHEMA}.item", id_column="id")
        run = ensure_run(conn, RunRef("blobgc_sweep", f"bench-drain-{uuid.uuid4().hex[:8]}"))
        cutoff = datetime.now(UTC) - GRACE
        started = time.perf_counter()
        fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
        shards = split_key_space(conn, workers, bound.id_column)

        def plan(key_range):
            with pg_connect(dsn) as own:
                return plan_collection(own, run, bound, refs, cutoff=cutoff, key_range=key_range)

        with ThreadPoolExecutor(len(shards)) as pool:
            planned = list(pool.map(plan, shards))
        out["plan_s"] = time.perf_counter() - started
        mark_gate = time.perf_counter()
        judgement = judge(conn, run, GateSettings())
        decision = APPROVED if judgement.needs_approval else PASSED
        record_judgement(conn, run, judgement, decision, "bench" if decision == APPROVED else None)
        require_go(conn, run)
        check_fresh(conn, run, plan_of(conn, run), PLAN_MAX_AGE_HOURS)
        out["gate_s"] = time.perf_counter() - mark_gate
        mark_execute = time.perf_counter()

        def execute(key_range):
            with pg_connect(dsn) as own:
                return execute_plan_part(own, run, bound, refs, cutoff=cutoff, part=range_part(key_range, NAME))

        with ThreadPoolExecutor(len(shards)) as pool:
            executed = list(pool.map(execute, shards))
        out["execute_s"] = time.perf_counter() - mark_execute
        mark_drain, cpu, server_cpu = time.perf_counter(), time.process_time(), process_cpu(server_pid)
        if os.environ.get("DRAIN_PROFILE"):  # one thread, profiled (cProfile sees only its own thread)
            import cProfile
            import functools
            import pstats

            outbox_module.object_stats = functools.partial(outbox_module.object_stats, streams=1, concurrency=1)
            profile = cProfile.Profile()
            profile.enable()
            drained = delete_owed_objects(conn, calls, run, workers=1, concurrency=1)
            profile.disable()
            pstats.Stats(profile).sort_stats(os.environ["DRAIN_PROFILE"]).print_stats(45)
        else:
            drained = delete_owed_objects(conn, calls, run, workers=2, connect=lambda: pg_connect(dsn))
        out["drain_s"] = time.perf_counter() - mark_drain
        out["drain_client_cpu_s"] = time.process_time() - cpu
        if server_pid:
            out["drain_server_cpu_s"] = process_cpu(server_pid) - server_cpu
        out["seconds"] = time.perf_counter() - started
    out.update({"planned_rows": sum(p.rows_deleted for p in planned), "rows": sum(e.rows_deleted for e in executed),
                "objects": drained.objects_deleted, "bytes": drained.bytes_reclaimed, "absent": drained.absent,
                "failed": drained.failed, "owed_after": drained.owed_after, "calls": dict(calls.calls)})
    out["drain_objects_per_s"] = out["objects"] / out["drain_s"]
    out["rows_per_s"] = out["rows"] / out["seconds"]
    return out


def listed_keys(s3, bucket: str) -> set[str]:
    return {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="garbage rows the sweep deletes")
    parser.add_argument("--referenced", type=int, default=30_000, help="rows a referencing table points at")
    parser.add_argument("--sample", type=int, default=1_000, help="garbage rows the one-at-a-time loop deletes")
    parser.add_argument("--before-sample", type=int, default=10_000, help="garbage rows the drain before issue 34 "
                        "drains (0: skip)")
    parser.add_argument("--layout", choices=("hash", "id"), default="hash", help="keys: media/{sha}.bin or {id}")
    parser.add_argument("--workers", type=int, default=2, help="id ranges planned and executed side by side")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "drain_speed.json")
    parser.add_argument("--server-pid", type=int, help="the S3 server's pid: its CPU time during the drain is shown")
    parser.add_argument("--log", action="store_true", help="log the drain's progress (INFO)")
    args = parser.parse_args()
    if args.log:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("blobgc.core.outbox").setLevel(logging.INFO)
    s3 = s3_client_from_env()
    bucket, before_bucket = f"bench-drain-{uuid.uuid4().hex[:8]}", f"bench-drain-before-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=before_bucket)
    collections_file = Path(tempfile.mkdtemp()) / "collections.yaml"
    collections_file.write_text(collections_yaml(bucket, args.layout))
    os.environ["BLOBGC_COLLECTIONS"] = str(collections_file)  # the drain's guard reads the collection from it
    results: dict = {"when": datetime.now(UTC).isoformat(), "layout": args.layout, "load": os.getloadavg()}
    try:
        dsn = fresh_database()
        total = args.rows + args.sample + args.referenced
        ids = list(range(1, total + 1))
        random.Random(34).shuffle(ids)
        referenced = ids[: args.referenced]
        garbage = sorted(ids[args.referenced :])
        sample_hi = garbage[args.sample - 1] if args.sample else 0  # the loop takes the lowest ids
        print(f"loading {total:,} rows ({args.rows + args.sample:,} garbage, 1 in {MISSING_EVERY} without its "
              f"object; {args.referenced:,} referenced) and their objects ...", flush=True)
        loaded = load(dsn, s3, bucket, args.layout, garbage, referenced)
        mark(dsn, bucket, args.layout)
        swept = [i for i in garbage if i > sample_hi and i % MISSING_EVERY]  # the sweep's objects that exist
        truth = {"objects": len(swept), "bytes": sum(size_of(i) for i in swept),
                 "absent": args.rows - len(swept), "loaded": loaded}
        sample_objects = sum(1 for i in garbage if i <= sample_hi and i % MISSING_EVERY)
        print(f"baseline: one row at a time over {args.sample:,} garbage rows ...", flush=True)
        results["baseline"] = baseline = one_at_a_time(dsn, s3, bucket, args.layout, 0, sample_hi)
        assert baseline["rows"] == args.sample and baseline["objects"] == sample_objects, baseline
        if args.before_sample:
            print(f"before: the drain before issue 34 over {args.before_sample:,} garbage rows; and the same keys "
                  "with their sizes recorded ...", flush=True)
            kept = args.before_sample * args.referenced // max(args.rows, 1)
            results["before"] = drain_before(dsn, s3, before_bucket, args.layout, args.before_sample, kept)
            empty_bucket(s3, before_bucket)
            s3.create_bucket(Bucket=before_bucket)
            results["recorded"] = drain_before(dsn, s3, before_bucket, args.layout, args.before_sample, kept,
                                               recorded=True)
        print(f"now: the whole sweep of {args.rows:,} garbage rows ...", flush=True)
        results["now"] = now = sweep(dsn, s3, bucket, args.layout, args.workers, args.server_pid)
        left = listed_keys(s3, bucket)
        expected_left = {key_of(args.layout, i) for i in referenced}
        exact = {"objects": now["objects"] == truth["objects"], "bytes": now["bytes"] == truth["bytes"],
                 "absent": now["absent"] == truth["absent"], "left": left == expected_left,
                 "rows": now["rows"] == args.rows}
        results["truth"], results["exact"] = truth, exact
    finally:
        for name in (bucket, before_bucket):
            empty_bucket(s3, name)
        drop_database()
    results["load_after"] = os.getloadavg()
    b, n = results["baseline"], results["now"]
    ratio = n["rows_per_s"] / b["rows_per_s"]
    print(f"\n## one at a time (baseline): {b['rows']:,} rows, {b['objects']:,} objects in {b['seconds']:.2f}s = "
          f"{b['rows_per_s']:,.0f} rows/s")
    if "before" in results:
        f = results["before"]
        print(f"## the drain before issue 34: {f['objects']:,} objects in {f['seconds']:.2f}s = "
              f"{f['objects_per_s']:,.0f} objects/s; calls {f['calls']}")
    if "recorded" in results:
        f = results["recorded"]
        print(f"## the drain of the same keys with their sizes recorded (the ceiling: nothing asked of the store): "
              f"{f['objects']:,} objects in {f['seconds']:.2f}s = {f['objects_per_s']:,.0f} objects/s")
    print(f"## the sweep now ({args.layout} keys, {args.rows:,} garbage rows among {args.rows + args.referenced:,}):")
    print(f"plan {n['plan_s']:.2f}s, gate {n['gate_s']:.3f}s, execute {n['execute_s']:.2f}s, drain {n['drain_s']:.2f}s"
          f" = {n['seconds']:.2f}s in all, {n['rows_per_s']:,.0f} rows/s")
    print(f"drain: {n['objects']:,} objects ({n['bytes']:,} bytes) deleted, {n['absent']:,} absent, {n['failed']} "
          f"failed, {n['owed_after']} owed after, in {n['drain_s']:.2f}s = {n['drain_objects_per_s']:,.0f} objects/s; "
          f"calls {n['calls']}")
    print(f"drain CPU: this process {n['drain_client_cpu_s']:.2f}s" + (
        f", the S3 server {n['drain_server_cpu_s']:.2f}s" if "drain_server_cpu_s" in n else ""))
    if "before" in results:
        print(f"drain now / before: x{n['drain_objects_per_s'] / results['before']['objects_per_s']:.1f}")
    print(f"whole sweep / one at a time: x{ratio:.1f}")
    t = results["truth"]
    print(f"exact: {results['exact']} (the bucket held {t['objects']:,} objects, {t['bytes']:,} bytes, of the garbage "
          f"rows; {t['absent']:,} were never written)")
    print(f"load average before {results['load'][0]:.2f}, after {results['load_after'][0]:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"raw figures: {args.json}")
    return 0 if all(results["exact"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
