#!/usr/bin/env python3
"""Benchmark seed 000's mark and sweep against the local stack (`make up; source .blobgc/env`).

Mark: seed 000's PL/pgSQL loop, verbatim (bench/seed000_mark_loop.sql on the seed's own "Blob"
tables), against blobgc_mark's set-based code on app.blob, with the same data in the same
database: blobs, 70% of them referenced through two referencing tables. Timed on the first pass
(which flips the 30% unreferenced blobs to unused) and on a pass with no flips, at every scale.

The same data is also marked as a collection whose mark state blobgc keeps in its own table
(docs/reference.md §6: `blobgc.mark_<name>`, nothing added to the user's table): a copy of the blobs and
their two referencing tables in schema `owned`, marked by `mark_collection` beside `app_blob`'s
column mode. Goals: within 2x of the column mode, and at least 20x the seed loop.

Sweep: the database side as blobgc_sweep's tasks do it (plan the blobs the mark found unused, the gate,
then execute the plan: claim, re-check, delete, deletion log and outbox, in batches of 1000); then S3
deletion from the outbox against the local S3 server, beside a one-DeleteObject-per-key baseline
measured in the same run. bench/plans.py compares the plan's price with the old one-pass sweep.

    python bench/mark_sweep.py                       # 100k and 1M blobs, 20k S3 objects
    python bench/mark_sweep.py --scales 20000 --s3-objects 5000   # a quick look
"""
from __future__ import annotations

import argparse
import json
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench_database import ROOT, fresh_database, timed, vacuum

from blobgc.core.clients import pg_connect, s3_client_from_env  # noqa: E402
from blobgc.kinds.blobs import bound_app_blob  # noqa: E402
from blobgc.core.key_space import split_key_space  # noqa: E402
from blobgc.collectors.mark import mark_collection, mark_in_columns  # noqa: E402
from blobgc.core.collections import Collection, bind  # noqa: E402
from blobgc.core.objects import delete_objects_in_batches  # noqa: E402
from blobgc.core.outbox import delete_owed_objects, record_deletions  # noqa: E402
from blobgc.core.gate import GateSettings, judge, record_judgement  # noqa: E402
from blobgc.core.plans import APPROVED, PASSED, PLAN_MAX_AGE_HOURS, fix_plan  # noqa: E402
from blobgc.core.plans import require_go  # noqa: E402
from blobgc.core.references import discover_references  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402
from blobgc.collectors.sweep import execute_plan_part, plan_collection, range_part  # noqa: E402
from blobgc.core.key_space import IdColumn  # noqa: E402

MARK_WORKERS = 2  # blobgc_mark's default: key ranges marked on two connections at once

# Blob i is attached to a post when i % 10 < 5 and used by a page when 3 <= i % 10 < 7:
# 70% of the blobs are referenced, some through both tables.
LOAD_APP = """
INSERT INTO app.post (id) SELECT 'p' || g FROM generate_series(0, %(n)s / 10) g;
INSERT INTO app.blob (id, filename, mimetype, size_bytes)
SELECT substr(md5(g::text), 1, 11), 'f' || g || '.jpg', 'image/jpeg', 1000 + g %% 5000
FROM generate_series(1, %(n)s) g;
INSERT INTO app.blob_attachment (blob_id, post_id)
SELECT substr(md5(g::text), 1, 11), 'p' || (g / 10) FROM generate_series(1, %(n)s) g WHERE g %% 10 < 5;
INSERT INTO app.page_using_blob (blob_id, url)
SELECT substr(md5(g::text), 1, 11), '/page/' || g FROM generate_series(1, %(n)s) g WHERE g %% 10 BETWEEN 3 AND 6;
"""
LOAD_OWNED = """
CREATE SCHEMA owned;
CREATE TABLE owned.blob (id text PRIMARY KEY, size_bytes bigint, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE owned.attachment (id bigserial PRIMARY KEY, blob_id text NOT NULL REFERENCES owned.blob);
CREATE TABLE owned.page_use (blob_id text REFERENCES owned.blob, url text, PRIMARY KEY (blob_id, url));
INSERT INTO owned.blob (id, size_bytes) SELECT id, size_bytes FROM app.blob;
INSERT INTO owned.attachment (blob_id) SELECT blob_id FROM app.blob_attachment;
CREATE INDEX ON owned.attachment (blob_id);
INSERT INTO owned.page_use (blob_id, url) SELECT blob_id, url FROM app.page_using_blob;
"""
OWNED = Collection(name="owned_blobs", table="owned.blob", id="id", created_at="created_at", size="size_bytes",
                   keys=["owned/{id}/raw"])
LOAD_SEED = """
INSERT INTO "Post" ("id") SELECT 'p' || g FROM generate_series(0, %(n)s / 10) g;
INSERT INTO "Blob" ("id", "filename", "mimetype")
SELECT substr(md5(g::text), 1, 11), 'f' || g || '.jpg', 'image/jpeg' FROM generate_series(1, %(n)s) g;
INSERT INTO "BlobAttachment" ("blobID", "postID")
SELECT substr(md5(g::text), 1, 11), 'p' || (g / 10) FROM generate_series(1, %(n)s) g WHERE g %% 10 < 5;
INSERT INTO "PageUsingBlob" ("blobID", "url")
SELECT substr(md5(g::text), 1, 11), '/page/' || g FROM generate_series(1, %(n)s) g WHERE g %% 10 BETWEEN 3 AND 6;
"""


def bench_mark(dsn: str, n: int) -> dict:
    conn = pg_connect(dsn)
    with conn.transaction():
        for statement in (LOAD_APP + LOAD_SEED).split(";"):
            if statement.strip():
                conn.execute(statement, {"n": n})
    vacuum(conn, "app.blob", "app.blob_attachment", "app.page_using_blob", '"Blob"', '"BlobAttachment"',
           '"PageUsingBlob"')
    seed_loop = (ROOT / "bench" / "seed000_mark_loop.sql").read_text()
    refs = discover_references(conn, "app.blob")

    def seed_pass() -> int:
        conn.execute(seed_loop)
        return conn.execute('SELECT count(*) FROM "Blob" WHERE "unused"').fetchone()[0]

    def ours(workers: int):
        return mark_in_columns(conn, bound_app_blob(""), refs, workers=workers, connect=lambda: pg_connect(dsn))

    out: dict = {"blobs": n, "workers": MARK_WORKERS}
    out["seed_first_s"], seed_unused = timed(seed_pass)
    out["ours_first_s"], first = timed(lambda: ours(MARK_WORKERS))
    assert first.became_unused == seed_unused, (first.became_unused, seed_unused)
    out["flipped"] = first.became_unused
    # steady state: autovacuum has cleaned up the first pass's dead tuples in both tables
    vacuum(conn, "app.blob", '"Blob"')
    out["seed_noflip_s"], _ = timed(seed_pass)
    vacuum(conn, '"Blob"')  # so autovacuum of the seed loop's churn does not run during our timing
    out["ours_noflip_1worker_s"], _ = timed(lambda: ours(1))
    out["ours_noflip_s"], second = timed(lambda: ours(MARK_WORKERS))
    assert second.became_unused == second.became_used == 0
    out["ratio_first"] = out["seed_first_s"] / out["ours_first_s"]
    out["ratio_noflip"] = out["seed_noflip_s"] / out["ours_noflip_s"]

    # the same blobs and references as a collection with blobgc-owned mark state
    with conn.transaction():
        for statement in LOAD_OWNED.split(";"):
            if statement.strip():
                conn.execute(statement)
    vacuum(conn, "owned.blob", "owned.attachment", "owned.page_use")
    bound = bind(conn, OWNED, default_bucket="bench")
    owned_refs = discover_references(conn, OWNED.table, id_column=OWNED.id)

    def owned() -> object:
        return mark_collection(conn, bound, owned_refs, workers=MARK_WORKERS, connect=lambda: pg_connect(dsn))

    out["owned_first_s"], owned_first = timed(owned)
    assert owned_first.became_unused == seed_unused, (owned_first.became_unused, seed_unused)
    vacuum(conn, "owned.blob", "blobgc.mark_owned_blobs")
    out["owned_noflip_s"], owned_second = timed(owned)
    assert owned_second.became_unused == owned_second.became_used == 0
    out["owned_vs_column_first"] = out["owned_first_s"] / out["ours_first_s"]
    out["owned_vs_column_noflip"] = out["owned_noflip_s"] / out["ours_noflip_s"]
    out["seed_vs_owned_noflip"] = out["seed_noflip_s"] / out["owned_noflip_s"]
    conn.close()
    return out


def bench_sweep_db(dsn: str, workers: int) -> dict:
    """Sweep every blob the mark found unused, database side only, as a run of blobgc_sweep does: plan
    `workers` id ranges in parallel (its mapped plan_deletions tasks), the gate, then execute each range's
    part in parallel (its mapped delete_unused_blobs tasks); then put the garbage back."""
    conn = pg_connect(dsn)
    conn.execute("DROP TABLE IF EXISTS bench_garbage")
    conn.execute("CREATE TABLE bench_garbage AS SELECT * FROM app.blob WHERE unused")
    vacuum(conn, "app.blob")
    run = RunRef("blobgc_sweep", f"bench-{uuid.uuid4().hex[:8]}")
    ensure_run(conn, run)
    fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
    bound = bound_app_blob("bench")  # never called: the keys are only owed to the outbox
    refs = discover_references(conn, "app.blob")
    # unused for two days (backdated, as the demo does), swept with a 24-hour grace: cut-offs never pass now
    conn.execute("UPDATE app.blob SET updated_at = now() - interval '2 days', created_at = now() - interval '2 days' "
                 "WHERE unused")
    cutoff = datetime.now(timezone.utc) - timedelta(hours=24)
    shards = split_key_space(conn, workers, IdColumn("app.blob"))

    def plan(k: int) -> object:
        with pg_connect(dsn) as wconn:
            return plan_collection(wconn, run, bound, refs, cutoff=cutoff, batch_size=1000, key_range=shards[k])

    def gate() -> None:
        judgement = judge(conn, run, GateSettings())  # a plan past the threshold is approved, as a person would
        approved = judgement.needs_approval
        record_judgement(conn, run, judgement, APPROVED if approved else PASSED, "bench" if approved else None)
        require_go(conn, run)

    def execute(k: int) -> object:
        with pg_connect(dsn) as wconn:
            return execute_plan_part(wconn, run, bound, refs, cutoff=cutoff, part=range_part(shards[k], bound.name))

    def all_shards(step) -> list:
        with ThreadPoolExecutor(len(shards)) as pool:
            return list(pool.map(step, range(len(shards))))

    plan_seconds, _ = timed(lambda: all_shards(plan))
    gate()
    execute_seconds, results = timed(lambda: all_shards(execute))
    seconds = plan_seconds + execute_seconds
    rows = sum(r.rows_deleted for r in results)
    conn.execute("TRUNCATE blobgc.outbox")  # these keys were never uploaded; the S3 phase uses real objects
    conn.execute("INSERT INTO app.blob SELECT * FROM bench_garbage")
    vacuum(conn, "app.blob")  # as autovacuum would, before the next measurement
    conn.close()
    return {"workers": workers, "blobs": rows, "seconds": seconds, "plan_seconds": plan_seconds,
            "execute_seconds": execute_seconds, "blobs_per_s": rows / seconds,
            "keys_logged": sum(r.objects_owed for r in results)}


def upload(s3, bucket: str, keys: list[str]) -> None:
    body = b"x" * 1024
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=body), keys))


def bench_s3(dsn: str, n_objects: int, n_baseline: int) -> dict:
    s3 = s3_client_from_env()
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    out: dict = {"objects": n_objects, "baseline_objects": n_baseline}

    # baseline: one DeleteObject call per key
    base_keys = [f"baseline/{i:07d}" for i in range(n_baseline)]
    upload(s3, bucket, base_keys)
    out["baseline_s"], _ = timed(lambda: [s3.delete_object(Bucket=bucket, Key=k) for k in base_keys])
    out["baseline_per_s"] = n_baseline / out["baseline_s"]

    # DeleteObjects alone, 1000 keys a call
    raw_keys = [f"raw/{i:07d}" for i in range(n_objects)]
    upload(s3, bucket, raw_keys)
    out["batch_s"], outcome = timed(lambda: delete_objects_in_batches(s3, bucket, raw_keys))
    assert len(outcome.deleted) == n_objects and not outcome.failed
    out["batch_per_s"] = n_objects / out["batch_s"]

    # end to end from the outbox: claim, DeleteObjects, settle the log and the run's counters
    keys = [f"blobs/{i:07d}/raw" for i in range(n_objects)]
    upload(s3, bucket, keys)
    conn = pg_connect(dsn)
    run = RunRef("blobgc_sweep", f"bench-s3-{uuid.uuid4().hex[:8]}")
    ensure_run(conn, run)
    with conn.transaction():
        record_deletions(conn, run, source="app.blob", bucket=bucket, keys=keys, sizes=[1024] * len(keys))
    out["outbox_s"], drained = timed(lambda: delete_owed_objects(conn, s3, run))
    assert drained.objects_deleted == n_objects and drained.owed_after == 0
    left = s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0)
    assert left == 0, f"{left} objects left"
    out["outbox_per_s"] = n_objects / out["outbox_s"]
    out["ratio_outbox_vs_baseline"] = out["outbox_per_s"] / out["baseline_per_s"]
    s3.delete_bucket(Bucket=bucket)
    conn.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="100000,1000000", help="comma-separated blob counts")
    parser.add_argument("--s3-objects", type=int, default=20_000)
    parser.add_argument("--baseline-objects", type=int, default=1_000)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "mark_sweep.json")
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]

    results: dict = {"mark": [], "when": datetime.now(timezone.utc).isoformat()}
    dsn = ""
    for n in scales:
        dsn = fresh_database(ROOT / "bench" / "seed000_schema.sql")
        print(f"mark, {n:,} blobs (70% referenced through 2 tables) ...", flush=True)
        results["mark"].append(bench_mark(dsn, n))
    print("sweep, database side ...", flush=True)
    # the same garbage with one worker, then with two (the DAG's default)
    results["sweep_db"] = [bench_sweep_db(dsn, 1), bench_sweep_db(dsn, 2)]
    print(f"sweep, S3 side: {args.s3_objects:,} objects ...", flush=True)
    results["sweep_s3"] = bench_s3(dsn, args.s3_objects, args.baseline_objects)

    print(f"\n## mark (seconds; ratio = seed loop / blobgc; blobgc on {MARK_WORKERS} connections)")
    print(f"{'blobs':>10} {'pass':>10} {'seed loop':>10} {'blobgc':>8} {'ratio':>7}")
    for m in results["mark"]:
        print(f"{m['blobs']:>10,} {'first':>10} {m['seed_first_s']:>10.2f} {m['ours_first_s']:>8.3f} "
              f"{m['ratio_first']:>6.1f}x   ({m['flipped']:,} flips)")
        print(f"{m['blobs']:>10,} {'no flips':>10} {m['seed_noflip_s']:>10.2f} {m['ours_noflip_s']:>8.3f} "
              f"{m['ratio_noflip']:>6.1f}x   (one connection: {m['ours_noflip_1worker_s']:.3f}s)")
    print("\n## mark, blobgc-owned state (a collection: blobgc.mark_<name>) beside app_blob's columns")
    print(f"{'blobs':>10} {'pass':>10} {'columns':>8} {'owned':>8} {'owned/columns':>14} {'seed loop/owned':>16}")
    for m in results["mark"]:
        print(f"{m['blobs']:>10,} {'first':>10} {m['ours_first_s']:>8.3f} {m['owned_first_s']:>8.3f} "
              f"{m['owned_vs_column_first']:>13.2f}x {m['seed_first_s'] / m['owned_first_s']:>15.1f}x")
        print(f"{m['blobs']:>10,} {'no flips':>10} {m['ours_noflip_s']:>8.3f} {m['owned_noflip_s']:>8.3f} "
              f"{m['owned_vs_column_noflip']:>13.2f}x {m['seed_vs_owned_noflip']:>15.1f}x")
    if len(results["mark"]) > 1:
        a, b = results["mark"][0], results["mark"][-1]
        growth = b["blobs"] / a["blobs"]
        print(f"growth x{growth:.0f} blobs: blobgc first pass x{b['ours_first_s'] / a['ours_first_s']:.1f}, "
              f"no-flip pass x{b['ours_noflip_s'] / a['ours_noflip_s']:.1f}; seed loop "
              f"x{b['seed_noflip_s'] / a['seed_noflip_s']:.1f}")
    print("\n## sweep, database side (plan; then claim, re-check, delete, log and owe 2 keys per blob; batches of 1000)")
    for s in results["sweep_db"]:
        print(f"{s['workers']} worker(s): {s['blobs']:,} blobs in {s['seconds']:.2f}s (plan {s['plan_seconds']:.2f}s, "
              f"execute {s['execute_seconds']:.2f}s) = {s['blobs_per_s']:,.0f} blobs/s "
              f"({s['keys_logged']:,} keys logged and owed)")
    o = results["sweep_s3"]
    print(f"\n## sweep, S3 side (local S3 server)\n"
          f"DeleteObject per key (baseline): {o['baseline_per_s']:,.0f} objects/s over {o['baseline_objects']:,}\n"
          f"DeleteObjects, 1000 keys a call: {o['batch_per_s']:,.0f} objects/s over {o['objects']:,}\n"
          f"from the outbox, end to end:     {o['outbox_per_s']:,.0f} objects/s over {o['objects']:,} "
          f"= {o['ratio_outbox_vs_baseline']:.1f}x the baseline")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"\nraw figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
