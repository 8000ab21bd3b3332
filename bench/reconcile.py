#!/usr/bin/env python3
"""Benchmark seed 001 §5's reconciliation against the local stack (`make up; source .blobgc/env`).

Data, at each scale N: N objects in a fresh bucket, half `pastes/{sha256}` and half image files
`images/{xx}/{id}/{size}.jpg` (four sizes per image id), 10% of them orphans (no row), all older
than the age floor; the rows in a fresh database. Objects are stored with the local S3 server's
bulk fixture loader (`scripts/s3_server.py`); every listing and deletion timed goes through the
S3 API.

- **Raw listing:** every shard listed page by page (1000 keys), nothing else: the ceiling.
- **Reconcile:** `blobgc.reconcile.reconcile_shard` over every shard, as the mapped tasks do one
  after another (listing, one database check per page, the reverse check, logging the orphans).
  Its throughput is objects checked per second; the goal is at least 0.8 of raw listing.
- **Baseline (Mastodon-style):** one database lookup per key and one DeleteObject per orphan, on
  a sample of keys.
- **Memory:** each scale's reconcile runs in a child process; its peak RSS (VmHWM) is reported.

    python bench/reconcile.py                          # 100k and 1M objects
    python bench/reconcile.py --scales 20000           # a quick look
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench_database import ROOT, fresh_database, timed
from paste_expiry import bulk_put

from blobgc.core.clients import pg_connect, s3_client_from_env  # noqa: E402
from blobgc.core.outbox import delete_owed_objects  # noqa: E402
from blobgc.collectors.reconcile.checks import PAGE  # noqa: E402
from blobgc.collectors.reconcile.listing import list_pages, reconcile_shard  # noqa: E402
from blobgc.collectors.reconcile.shards import discover_shards  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402

SIZES = ("orig", "big", "medium", "thumb")


def make_data(dsn: str, bucket: str, n: int) -> dict:
    """n objects, half pastes and half image files; every 10th content / image id has no row."""
    conn = pg_connect(dsn)
    n_pastes, n_images = n // 2, n // 2 // len(SIZES)
    hashes = [h for (h,) in conn.execute(
        "SELECT encode(sha256(('c' || g)::bytea), 'hex') FROM generate_series(1, %s) g", (n_pastes,))]
    image_ids = [i for (i,) in conn.execute("SELECT md5('i' || g) FROM generate_series(1, %s) g", (n_images,))]
    with conn.transaction():
        conn.execute("INSERT INTO app.content (content_hash, ref_count, size_bytes) "
                     "SELECT h, 1, 100 FROM unnest(%s::text[]) WITH ORDINALITY AS x(h, o) WHERE o %% 10 <> 0",
                     (hashes,))
        conn.execute("INSERT INTO app.image (image_id, num) "
                     "SELECT i, 1 FROM unnest(%s::text[]) WITH ORDINALITY AS x(i, o) WHERE o %% 10 <> 0", (image_ids,))
    conn.execute("VACUUM ANALYZE app.content")
    conn.execute("VACUUM ANALYZE app.image")
    conn.close()
    keys = [f"pastes/{h}" for h in hashes] + [f"images/{i[:2]}/{i}/{s}.jpg" for i in image_ids for s in SIZES]
    chunks = [keys[start:start + 20_000] for start in range(0, len(keys), 20_000)]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda chunk: bulk_put(bucket, [(k, 100) for k in chunk], age_seconds=2 * 86400), chunks))
    orphans = len(hashes[9::10]) + len(image_ids[9::10]) * len(SIZES)
    return {"objects": len(keys), "orphans": orphans}


def raw_listing(bucket: str) -> dict:
    s3 = s3_client_from_env()
    shards = discover_shards(s3, bucket)
    started = time.perf_counter()
    keys = pages = 0
    for shard in shards:
        for contents, _ in list_pages(s3, bucket, shard, ""):
            keys += len(contents)
            pages += 1
    seconds = time.perf_counter() - started
    return {"shards": len(shards), "keys": keys, "pages": pages, "seconds": seconds, "keys_per_s": keys / seconds}


def reconcile_everything(dsn: str, bucket: str, run_id: str) -> dict:
    """What the mapped reconcile_shard tasks do, one shard after another, in this process."""
    s3 = s3_client_from_env()
    conn = pg_connect(dsn)
    run = RunRef("blobgc_reconcile", run_id)
    ensure_run(conn, run)
    shards = discover_shards(s3, bucket, conn=conn)
    cutoff = datetime.now(timezone.utc) - timedelta(hours=24)  # min_age_hours 24; the objects are 2 days old
    started = time.perf_counter()
    results = [reconcile_shard(conn, s3, run, shard, bucket=bucket, confirmations=1, cutoff=cutoff) for shard in shards]
    seconds = time.perf_counter() - started
    conn.close()
    keys = sum(r.keys_checked for r in results)
    return {"shards": len(shards), "keys": keys, "seconds": seconds, "keys_per_s": keys / seconds,
            "orphans": sum(r.orphans for r in results), "unknown": sum(r.unknown_keys for r in results),
            "missing": sum(r.missing_objects for r in results),
            "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that over from the parent across exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def baseline(dsn: str, bucket: str, sample: int) -> dict:
    """Mastodon-style: list, then one database lookup per key and one DeleteObject per orphan, on `sample` keys."""
    s3 = s3_client_from_env()
    conn = pg_connect(dsn)
    started = time.perf_counter()
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="pastes/",
                                                              PaginationConfig={"MaxItems": sample}):
        keys += [o["Key"] for o in page.get("Contents", [])]
    deleted = 0
    for key in keys:
        found = conn.execute("SELECT 1 FROM app.content WHERE content_hash = %s", (key[len("pastes/"):],)).fetchone()
        if found is None:
            s3.delete_object(Bucket=bucket, Key=key)
            deleted += 1
    seconds = time.perf_counter() - started
    conn.close()
    return {"keys": len(keys), "deleted": deleted, "seconds": seconds, "keys_per_s": len(keys) / seconds}


def child_main(dsn: str, bucket: str, run_id: str) -> int:
    print(json.dumps(reconcile_everything(dsn, bucket, run_id)))
    return 0


def bench_scale(n: int, baseline_sample: int) -> dict:
    dsn = fresh_database()
    s3 = s3_client_from_env()
    bucket = f"bench-reconcile-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    print(f"  loading {n:,} objects ...", flush=True)
    seconds, data = timed(lambda: make_data(dsn, bucket, n))
    print(f"  loaded in {seconds:.0f}s; raw listing ...", flush=True)
    raw = raw_listing(bucket)
    print(f"  raw listing {raw['keys_per_s']:,.0f} keys/s; reconcile (child process) ...", flush=True)
    child = subprocess.run([sys.executable, __file__, "--child", dsn, bucket, f"bench-{n}"], capture_output=True,
                           text=True, check=True)
    ours = json.loads(child.stdout.strip().splitlines()[-1])
    assert ours["keys"] == data["objects"] and ours["orphans"] == data["orphans"], (ours, data)
    base = baseline(dsn, bucket, baseline_sample)  # before the drain, so its sample still has its orphans
    conn = pg_connect(dsn)
    run = RunRef("blobgc_reconcile", f"bench-{n}")
    drain_s, drained = timed(lambda: delete_owed_objects(conn, s3, run, workers=2, connect=lambda: pg_connect(dsn)))
    assert drained.objects_deleted == data["orphans"] and drained.owed_after == 0  # gone already counts as deleted
    conn.close()
    return {"n": n, "data": data, "raw": raw, "reconcile": ours,
            "drain": {"seconds": drain_s, "objects": drained.objects_deleted}, "baseline": base,
            "ratio_vs_raw": ours["keys_per_s"] / raw["keys_per_s"],
            "ratio_vs_baseline": ours["keys_per_s"] / base["keys_per_s"]}


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        return child_main(*sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="100000,1000000")
    parser.add_argument("--baseline-keys", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "reconcile.json")
    args = parser.parse_args()
    results = {"when": datetime.now(timezone.utc).isoformat(), "page": PAGE, "scales": []}
    for n in (int(s) for s in args.scales.split(",")):
        print(f"scale {n:,} ...", flush=True)
        results["scales"].append(bench_scale(n, args.baseline_keys))
    print(f"\n## reconcile (pages of {PAGE}; shards one after another, as mapped tasks on one worker)")
    print(f"{'objects':>10} {'shards':>6} {'raw list/s':>11} {'reconcile/s':>12} {'ratio':>6} {'orphans':>8} "
          f"{'drain/s':>8} {'peak RSS':>9}")
    for r in results["scales"]:
        print(f"{r['data']['objects']:>10,} {r['reconcile']['shards']:>6} {r['raw']['keys_per_s']:>11,.0f} "
              f"{r['reconcile']['keys_per_s']:>12,.0f} {r['ratio_vs_raw']:>6.2f} {r['reconcile']['orphans']:>8,} "
              f"{r['drain']['objects'] / r['drain']['seconds']:>8,.0f} {r['reconcile']['peak_rss_mb']:>7.1f}MB")
    print("\n## baseline (Mastodon-style: one lookup per key, one DeleteObject per orphan)")
    for r in results["scales"]:
        b = r["baseline"]
        print(f"{r['data']['objects']:>10,} objects: {b['keys']:,} keys ({b['deleted']} orphans) in {b['seconds']:.2f}s "
              f"= {b['keys_per_s']:,.0f} keys/s; reconcile is {r['ratio_vs_baseline']:.0f}x")
    if len(results["scales"]) > 1:
        a, b = results["scales"][0], results["scales"][-1]
        print(f"\npeak RSS: {a['reconcile']['peak_rss_mb']:.1f} MB at {a['data']['objects']:,} objects, "
              f"{b['reconcile']['peak_rss_mb']:.1f} MB at {b['data']['objects']:,} "
              f"(+{b['reconcile']['peak_rss_mb'] - a['reconcile']['peak_rss_mb']:.1f} MB)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"raw figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
