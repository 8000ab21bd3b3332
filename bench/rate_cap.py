#!/usr/bin/env python3
"""The delete-rate cap shared by every worker (issue 35): two worker processes drain one bucket under a cap of N
deletes a second, at two rates, and the deletes the bucket saw a second are measured over the run.

Each rate: `--objects` objects (default 8 s of the rate, at least 8,000: two claims a worker) bulk-loaded into a bucket of the bench's
own, owed by one DAG run (sizes recorded: nothing is listed or HEADed, the drain deletes only), then two processes,
each as a Celery worker's `delete_owed_objects` task (`blobgc.core.outbox.delete_owed_objects` on its own
connections, its store wrapped in `blobgc.core.rate.CappedStore` with the cap of Variable blobgc_rate_limits
`{bucket: N}`, its token bucket in the stack's Redis), claiming from the same owed rows (SKIP LOCKED). Every
DeleteObjects call is noted (keys, when sent, when answered) in each process; the rate is the keys of all calls
but the first over the time from the first call's sending to the last call's, and its ratio to N (within ±10%
is the goal). The same drain uncapped, first, is the baseline: how fast the two workers go without the cap.

    make up; source .blobgc/env
    python bench/rate_cap.py                         # rates 500 and 2000
    python bench/rate_cap.py --rates 300,1000 --seconds 5

Uses a database of its own (`blobgc_bench_rate`), dropped at the end, and buckets of its own, emptied.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
import uuid

import bench_database
from bench_database import ROOT, drop_database, empty_bucket, fresh_database
from paste_expiry import bulk_put

sys.path.insert(0, str(ROOT / "plugins"))
from blobgc.core.clients import pg_connect, redis_from_env, s3_client_from_env  # noqa: E402
from blobgc.core.outbox import delete_owed_objects, record_deletions  # noqa: E402
from blobgc.core.rate import REDIS_PREFIX, CappedStore, RateCap, RateLimits  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402

bench_database.BENCH_DB = "blobgc_bench_rate"
DAG = "blobgc_bench_rate"


class Noted:
    """A store noting each DeleteObjects call: (keys, sent, answered)."""

    def __init__(self, store, calls) -> None:
        self.store, self.calls = store, calls

    def __getattr__(self, name):
        return getattr(self.store, name)

    def delete_objects(self, **kwargs):
        sent = time.time()
        answer = self.store.delete_objects(**kwargs)
        self.calls.append((len(kwargs["Delete"]["Objects"]), sent, time.time()))
        return answer


def worker(dsn: str, run_id: str, bucket: str, rate: float | None, calls) -> None:
    """One worker: its own connections, its own client, the shared cap (none when `rate` is None)."""
    store = Noted(s3_client_from_env(), calls)
    if rate is not None:
        store = CappedStore(store, RateCap(redis_from_env(), RateLimits.parse({bucket: rate})))
    with pg_connect(dsn) as conn:
        delete_owed_objects(conn, store, RunRef(DAG, run_id), batch_size=1000, concurrency=4, workers=2,
                            connect=lambda: pg_connect(dsn))


def one_rate(dsn: str, rate: float | None, objects: int, chunk: int) -> dict:
    s3, bucket = s3_client_from_env(), f"bench-rate-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    keys = [f"media/{i:08d}.bin" for i in range(objects)]
    for start in range(0, objects, 20_000):
        bulk_put(bucket, [(k, 100) for k in keys[start:start + 20_000]])
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    with pg_connect(dsn) as conn:
        run = ensure_run(conn, RunRef(DAG, run_id))
        with conn.transaction():
            for start in range(0, objects, chunk):  # owed in rows of `chunk` keys, as a plan's batches owe them
                part = keys[start:start + chunk]
                record_deletions(conn, run, source="bench.objects", bucket=bucket, keys=part, sizes=[100] * len(part))
    redis_from_env().delete(REDIS_PREFIX + bucket)
    with multiprocessing.Manager() as manager:
        calls = [manager.list(), manager.list()]
        started = time.perf_counter()
        procs = [multiprocessing.Process(target=worker, args=(dsn, run_id, bucket, rate, c)) for c in calls]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        wall = time.perf_counter() - started
        noted = [list(c) for c in calls]
    left = s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0)
    redis_from_env().delete(REDIS_PREFIX + bucket)
    every = sorted(c for worker_calls in noted for c in worker_calls)
    deleted = sum(n for n, _, _ in every)
    span = every[-1][1] - every[0][1] if len(every) > 1 else 0.0
    measured = (deleted - every[0][0]) / span if span else float("nan")
    shares = [sum(n for n, _, _ in w) for w in noted]
    empty_bucket(s3, bucket)
    return {"cap": rate, "objects": objects, "deleted": deleted, "left": left, "calls": len(every),
            "per_worker": shares, "seconds": round(wall, 2), "measured_per_s": round(measured, 1),
            "ratio_to_cap": round(measured / rate, 3) if rate else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="500,2000", help="caps, deletes a second")
    parser.add_argument("--seconds", type=float, default=8.0, help="each capped run's length at its rate")
    parser.add_argument("--chunk", type=int, default=100, help="keys per owed row")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    dsn = fresh_database()
    results = []
    try:
        most = max(8_000, int(max(rates) * args.seconds))
        base = one_rate(dsn, None, most, args.chunk)
        print(f"## uncapped, 2 workers: {base['deleted']:,} objects in {base['seconds']:.2f}s = "
              f"{base['measured_per_s']:,.0f} deletes/s (per worker {base['per_worker']})", flush=True)
        results.append(base)
        for rate in rates:
            row = one_rate(dsn, rate, max(8_000, int(rate * args.seconds)), args.chunk)
            results.append(row)
            verdict = "within ±10%" if 0.9 <= row["ratio_to_cap"] <= 1.1 else "OUTSIDE ±10%"
            print(f"## cap {rate:,.0f}/s, 2 workers: {row['deleted']:,} objects in {row['seconds']:.2f}s = "
                  f"{row['measured_per_s']:,.1f} deletes/s = x{row['ratio_to_cap']} the cap ({verdict}); "
                  f"per worker {row['per_worker']}; uncapped / capped x{base['measured_per_s'] / row['measured_per_s']:.1f}",
                  flush=True)
    finally:
        drop_database()
    out = ROOT / "bench" / "results" / "rate_cap.json"
    out.write_text(json.dumps({"bench": "rate_cap", "results": results}, indent=2))
    print(f"raw figures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
