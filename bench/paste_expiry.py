#!/usr/bin/env python3
"""Benchmark seed 002's batch paste expiry against the local stack (`make up; source .blobgc/env`).

Data: `--pastes` pastes (default 1,000,000) over half as many contents (two pastes each), with
`--expired` of the pastes (default 60%) due. Every content's object is in the S3 server and half
of the pastes are cached in Redis. The rows are loaded with SQL and the objects with the local S3
server's bulk fixture loader (`scripts/s3_server.py`): moto stores ~150 PUTs/s, far too slow to
upload half a million objects. Everything the benchmark times goes through the real APIs.

Baseline: seed 002's "one at a time" (one Postgres transaction, one S3 DeleteObject and one Redis
DEL per paste), timed on a sample of pastes made with the application's own write path
(`blobgc.pastes.create_paste`), in the same database, bucket and Redis, in the same run.

blobgc: the DAG's steps as its tasks call them: `check_ref_counts` (with the run's own plan fixed
first, as its task does; it plans the contents no paste points at), the planning (`expiry_ranges`
and the mapped `plan_expiry` tasks: `plan_due_pastes`, an item of 1000 pastes per batch, one
connection per range of content_hash), the execution of the plan (`plan_parts` and the mapped
`expire_pastes` tasks: `execute_planned_pastes`, an item per transaction, one connection per part),
`delete_owed_objects` (DeleteObjects, 2 drains with 4 calls in flight each) and `purge_owed_cache_keys`
(pipelined variadic UNLINK). The gate between planning and execution is not timed (it lets the plan
through or waits for a person). In the DAG the last two run side by side; here they are timed one
after the other, so the total is an upper bound.

    python bench/paste_expiry.py                          # 1M pastes, 60% expired
    python bench/paste_expiry.py --pastes 100000          # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench_database import ROOT, fresh_database, objects_present, timed, vacuum

from blobgc.core.cache_purge import purge_owed_cache_keys  # noqa: E402
from blobgc.core.clients import pg_connect, redis_from_env, require_env, s3_client_from_env  # noqa: E402
from blobgc.core.outbox import delete_owed_objects  # noqa: E402
from blobgc.kinds.pastes.expiry import check_ref_counts, execute_planned_pastes, plan_due_pastes  # noqa: E402
from blobgc.core.gate import let_through  # noqa: E402
from blobgc.kinds.pastes.layouts import content_key
from blobgc.core.plans import PLAN_MAX_AGE_HOURS, fix_plan  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402
from demo_app.pastes import create_paste  # noqa: E402

REFERENCE_TIME = datetime(2026, 11, 21, tzinfo=timezone.utc)
OUTBOX_DRAINS = 2  # as the DAG's delete_owed_objects task (blobgc.dag_kit.steps.OUTBOX_DRAINS)
SAMPLE_EXPIRES = datetime(2025, 6, 1, tzinfo=timezone.utc)  # before every paste of the main data
CONTENT_HASH = "encode(sha256(('content ' || {g})::bytea), 'hex')"

# paste g (1..n) points at content g % contents; it is expired when a hash of g falls below the share
LOAD = f"""
INSERT INTO app.content (content_hash, ref_count, size_bytes)
SELECT {CONTENT_HASH.format(g="g")}, 0, 64 + (g::bigint * 7919) %% 961 FROM generate_series(0, %(contents)s - 1) g;
INSERT INTO app.paste (short_code, content_hash, expires_at)
SELECT 'p' || g,
       {CONTENT_HASH.format(g="(g %% %(contents)s)")},
       CASE WHEN ('x' || substr(md5(g::text), 1, 8))::bit(32)::bigint < %(expired)s * 4294967296
            THEN %(ref)s::timestamptz - (g %% 720) * interval '1 hour'
            ELSE %(ref)s::timestamptz + (1 + g %% 720) * interval '1 hour' END
FROM generate_series(1, %(pastes)s) g;
UPDATE app.content c SET ref_count = p.n
FROM (SELECT content_hash, count(*) AS n FROM app.paste GROUP BY content_hash) p
WHERE c.content_hash = p.content_hash;
"""

# seed 002's flow, one paste per round: 1 query (claim + decrement + deletes), 1 S3 call, 1 Redis call
SEED_ONE_PASTE = """
WITH paste AS (
    DELETE FROM app.paste WHERE short_code = (
        SELECT short_code FROM app.paste
        WHERE expires_at < %(ref)s AND status = 'NOT_EXPIRED'
        ORDER BY expires_at, short_code LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING short_code, content_hash
), decremented AS (
    UPDATE app.content c SET ref_count = ref_count - 1 FROM paste
    WHERE c.content_hash = paste.content_hash
    RETURNING c.content_hash, c.ref_count
)
SELECT paste.short_code, paste.content_hash, decremented.ref_count
FROM paste JOIN decremented USING (content_hash)
"""


def bulk_put(bucket: str, rows: list[tuple[str, int]], age_seconds: int = 0) -> None:
    """Store objects through the local S3 server's fixture loader (see scripts/s3_server.py), written
    `age_seconds` ago (a run's cut-offs never pass the present, so benchmarks age their objects)."""
    body = "\n".join(f"{key}\t{size}" for key, size in rows).encode()
    url = f"{require_env('BLOBGC_S3_ENDPOINT')}/_blobgc/bulk-put?bucket={bucket}&age={age_seconds}"
    with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=600) as response:
        stored = int(response.read())
    assert stored == len(rows), f"stored {stored} of {len(rows)}"


def load(dsn: str, bucket: str, prefix: str, pastes: int, expired: float) -> dict:
    conn, redis = pg_connect(dsn), redis_from_env()
    contents = pastes // 2
    seconds, _ = timed(lambda: [conn.execute(s, {"contents": contents, "pastes": pastes, "expired": expired,
                                                 "ref": REFERENCE_TIME})
                                for s in LOAD.split(";") if s.strip()])
    vacuum(conn, "app.content", "app.paste")
    print(f"  rows loaded in {seconds:.1f}s", flush=True)
    objects = conn.execute("SELECT content_hash, size_bytes FROM app.content").fetchall()

    def put(start: int) -> None:
        bulk_put(bucket, [(content_key(h), size) for h, size in objects[start:start + 10_000]])

    with ThreadPoolExecutor(2) as pool:
        seconds, _ = timed(lambda: list(pool.map(put, range(0, len(objects), 10_000))))
    print(f"  {len(objects):,} objects stored in {seconds:.1f}s", flush=True)
    codes = [r[0] for r in conn.execute("SELECT short_code FROM app.paste WHERE short_code ~ '[02468]$'")]
    pipe = redis.pipeline(transaction=False)
    for i, code in enumerate(codes):
        pipe.set(f"{prefix}{code}", b"cached paste body " * 4)
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    due = conn.execute("SELECT count(*) FROM app.paste WHERE expires_at < %s", (REFERENCE_TIME,)).fetchone()[0]
    doomed = conn.execute(
        "SELECT count(*) FROM app.content c WHERE NOT EXISTS (SELECT 1 FROM app.paste p "
        "WHERE p.content_hash = c.content_hash AND p.expires_at >= %s)", (REFERENCE_TIME,)).fetchone()[0]
    conn.close()
    return {"pastes": pastes, "contents": contents, "expired_pastes": due, "contents_to_delete": doomed,
            "objects": len(objects), "cached": len(codes)}


def baseline(dsn: str, s3, bucket: str, prefix: str, n: int) -> dict:
    """Seed 002's one-at-a-time cleanup over `n` pastes made with the write path (2 per content, 60% due)."""
    redis = redis_from_env()
    conn = pg_connect(dsn)
    rng = random.Random(2)
    for i in range(n):
        create_paste(conn, s3, redis, bucket=bucket, content=f"sample {i // 2}".encode(), redis_prefix=prefix,
                     expires_at=SAMPLE_EXPIRES if rng.random() < 0.6 else REFERENCE_TIME + timedelta(days=1),
                     short_code=f"sample-{i}")
    due = conn.execute("SELECT count(*) FROM app.paste WHERE expires_at < %s", (SAMPLE_EXPIRES + timedelta(1),))
    due = due.fetchone()[0]

    def one_at_a_time() -> tuple[int, int]:
        pastes = objects = 0
        while True:
            with conn.transaction():
                row = conn.execute(SEED_ONE_PASTE, {"ref": SAMPLE_EXPIRES + timedelta(1)}).fetchone()
                if row is None:
                    return pastes, objects
                short_code, digest, ref_count = row
                if ref_count <= 0:
                    s3.delete_object(Bucket=bucket, Key=content_key(digest))
                    conn.execute("DELETE FROM app.content WHERE content_hash = %s", (digest,))
                    objects += 1
            redis.delete(f"{prefix}{short_code}")
            pastes += 1

    seconds, (pastes, objects) = timed(one_at_a_time)
    assert pastes == due
    conn.close()
    return {"pastes": pastes, "objects_deleted": objects, "seconds": seconds, "pastes_per_s": pastes / seconds}


def ours(dsn: str, s3, bucket: str, prefix: str, workers: int) -> dict:
    conn, redis = pg_connect(dsn), redis_from_env()
    run = ensure_run(conn, RunRef("blobgc_paste_expiry", f"bench-{uuid.uuid4().hex[:8]}"), REFERENCE_TIME)
    fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)  # the check_ref_counts task's first step (fix_run_plan)
    out: dict = {}
    out["check_ref_counts_s"], drift = timed(lambda: check_ref_counts(conn, run, bucket=bucket, plan_orphans=True))
    assert drift.drifted == 0 and drift.orphans_planned == 0, drift

    def connect():
        return pg_connect(dsn)

    out["plan_s"], planned = timed(lambda: plan_due_pastes(conn, run, bucket=bucket, workers=workers,
                                                           connect=connect))
    out["gate_s"], _decision = timed(lambda: let_through(conn, run, approved_by="bench"))  # the gate, as the DAG's
    out["execute_s"], executed = timed(lambda: execute_planned_pastes(conn, run, redis_prefix=prefix,
                                                                      workers=workers, connect=connect))
    assert (executed.pastes_deleted, executed.objects_owed) == (planned.pastes, planned.objects), (planned, executed)
    assert executed.skipped_pastes == executed.skipped_objects == 0, executed
    out["expire_s"] = out["plan_s"] + out["execute_s"]
    out["s3_s"], drained = timed(lambda: delete_owed_objects(conn, s3, run, workers=OUTBOX_DRAINS,
                                                             connect=connect))
    out["redis_s"], purged = timed(lambda: purge_owed_cache_keys(conn, redis, run))
    out.update(workers=workers, pastes=executed.pastes_deleted, contents=executed.contents_deleted,
               plan_items=planned.batches, items_executed=executed.items,
               objects_deleted=drained.objects_deleted, objects_failed=drained.failed,
               cache_keys_purged=purged.keys_purged, cache_keys_found=purged.keys_found,
               redis_round_trips=purged.round_trips)
    out["clean_s"] = out["expire_s"] + out["s3_s"] + out["redis_s"]
    out["total_s"] = out["check_ref_counts_s"] + out["clean_s"]
    out["pastes_per_s"] = executed.pastes_deleted / out["clean_s"]
    conn.close()
    return out


def verify(dsn: str, s3, bucket: str, prefix: str, expected: dict) -> dict:
    """Fully cleaned: no due paste, every doomed content and object gone, no expired code cached, nothing owed."""
    conn, redis = pg_connect(dsn), redis_from_env()
    due = conn.execute("SELECT count(*) FROM app.paste WHERE expires_at < %s", (REFERENCE_TIME,)).fetchone()[0]
    contents = conn.execute("SELECT count(*) FROM app.content").fetchone()[0]
    owed = conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0]
    owed_cache = conn.execute("SELECT count(*) FROM blobgc.cache_purge").fetchone()[0]
    drift = conn.execute("SELECT count(*) FROM app.content c WHERE ref_count <> "
                         "(SELECT count(*) FROM app.paste p WHERE p.content_hash = c.content_hash)").fetchone()[0]
    deleted_keys = [k for (keys,) in conn.execute("SELECT keys FROM blobgc.deletion_log WHERE source = 'app.content'")
                    for k in keys]
    live = [content_key(h) for (h,) in conn.execute("SELECT content_hash FROM app.content ORDER BY random() LIMIT 500")]
    rng = random.Random(1)
    gone_sample = rng.sample(deleted_keys, min(500, len(deleted_keys)))
    gone_present = objects_present(s3, bucket, gone_sample)
    live_present = objects_present(s3, bucket, live)
    all_codes = [f"{prefix}p{g}" for g in range(1, expected["pastes"] + 1)]
    cached_left = 0
    for start in range(0, len(all_codes), 10_000):
        cached_left += redis.exists(*all_codes[start:start + 10_000])
    live_cached = conn.execute("SELECT count(*) FROM app.paste WHERE short_code ~ '^p[0-9]*[02468]$'").fetchone()[0]
    sample_contents = conn.execute(
        "SELECT count(DISTINCT content_hash) FROM app.paste WHERE short_code LIKE 'sample-%'").fetchone()[0]
    unreferenced = conn.execute("SELECT count(*) FROM app.content c WHERE NOT EXISTS "
                                "(SELECT 1 FROM app.paste p WHERE p.content_hash = c.content_hash)").fetchone()[0]
    conn.close()
    result = {"due_pastes_left": due, "contents_left": contents, "owed_objects": owed, "owed_cache_rows": owed_cache,
              "ref_count_drift": drift, "deleted_sample_present": gone_present, "live_sample_present": live_present,
              "live_sample": len(live), "cached_keys_left": cached_left, "live_cached_pastes": live_cached}
    assert due == 0 and owed == 0 and owed_cache == 0 and drift == 0, result
    assert unreferenced == 0, result
    assert contents == expected["contents"] - expected["contents_to_delete"] + sample_contents, result
    assert gone_present == 0 and live_present == len(live), result
    assert cached_left == live_cached, result  # only the cached codes of pastes still alive remain
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pastes", type=int, default=1_000_000)
    parser.add_argument("--expired", type=float, default=0.6)
    parser.add_argument("--baseline-pastes", type=int, default=2_000)
    parser.add_argument("--workers", type=int, default=2, help="expiry_workers (the DAG's default: 2)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "paste_expiry.json")
    args = parser.parse_args()

    dsn = fresh_database()
    s3 = s3_client_from_env()
    bucket = f"bench-pastes-{uuid.uuid4().hex[:8]}"
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    s3.create_bucket(Bucket=bucket)
    results: dict = {"when": datetime.now(timezone.utc).isoformat(), "cpus": os.cpu_count()}
    print(f"loading {args.pastes:,} pastes over {args.pastes // 2:,} contents, {args.expired:.0%} expired ...",
          flush=True)
    results["data"] = load(dsn, bucket, prefix, args.pastes, args.expired)
    print(f"baseline: seed 002 one at a time over {args.baseline_pastes:,} write-path pastes ...", flush=True)
    results["baseline"] = baseline(dsn, s3, bucket, prefix, args.baseline_pastes)
    with pg_connect(dsn) as conn:
        vacuum(conn, "app.content", "app.paste")
    print("blobgc: check_ref_counts, plan_expiry, expire_pastes, delete_owed_objects, purge_owed_cache_keys ...",
          flush=True)
    results["blobgc"] = ours(dsn, s3, bucket, prefix, args.workers)
    results["verified"] = verify(dsn, s3, bucket, prefix, results["data"])
    results["ratio"] = results["blobgc"]["pastes_per_s"] / results["baseline"]["pastes_per_s"]

    d, b, o = results["data"], results["baseline"], results["blobgc"]
    print(f"\n## data\n{d['pastes']:,} pastes over {d['contents']:,} contents; {d['expired_pastes']:,} expired; "
          f"{d['contents_to_delete']:,} contents lose every paste; {d['objects']:,} objects; "
          f"{d['cached']:,} pastes cached in Redis")
    print(f"\n## baseline: seed 002 one at a time (1 query, 1 DeleteObject, 1 DEL per paste)\n"
          f"{b['pastes']:,} pastes ({b['objects_deleted']:,} objects) in {b['seconds']:.2f}s = "
          f"{b['pastes_per_s']:,.0f} pastes/s")
    print(f"\n## blobgc (batches of 1000; plan_expiry and expire_pastes on {o['workers']} connections)\n"
          f"check_ref_counts     {o['check_ref_counts_s']:7.2f}s  (scan of every content; no drift, no orphans)\n"
          f"plan_expiry          {o['plan_s']:7.2f}s  {o['pastes']:,} pastes in {o['plan_items']:,} plan items\n"
          f"expire_pastes        {o['execute_s']:7.2f}s  {o['pastes']:,} pastes, {o['contents']:,} contents, "
          f"{o['items_executed']:,} items\n"
          f"  planned + executed {o['expire_s']:7.2f}s\n"
          f"delete_owed_objects  {o['s3_s']:7.2f}s  {o['objects_deleted']:,} objects "
          f"({o['objects_deleted'] / o['s3_s']:,.0f}/s), {o['objects_failed']} failed\n"
          f"purge_cache_keys     {o['redis_s']:7.2f}s  {o['cache_keys_purged']:,} keys "
          f"({o['cache_keys_found']:,} were cached) in {o['redis_round_trips']:,} round trips\n"
          f"cleaned (4 steps)    {o['clean_s']:7.2f}s  = {o['pastes_per_s']:,.0f} pastes/s = "
          f"{results['ratio']:.0f}x the baseline\n"
          f"with check_ref_counts {o['total_s']:6.2f}s")
    v = results["verified"]
    print(f"\nverified: 0 due pastes, {v['contents_left']:,} contents left, nothing owed, no drift; "
          f"{v['deleted_sample_present']}/500 deleted keys still in S3, {v['live_sample_present']}/{v['live_sample']} "
          f"live keys present; {v['cached_keys_left']:,} cached codes left = the live pastes cached")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nraw figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
