#!/usr/bin/env python3
"""Benchmark seed 004's media store against the local stack (`make up; source .blobgc/env`).

1. **Thumbnails per second from the queue.** `--jobs` masters (JPEG, 3000x2000, as finalize stores
   them) with their jobs in `media-thumb-queue`; `drain_thumbnail_queue` as the DAG's task calls
   it (batches of 50, 2 threads) writes both WebP sizes of each. Baseline, same run, same masters:
   a naive worker, one job at a time (RPOP), each size decoded from the full-size image.
2. **Monthly quota for a user with 10,000 objects** (masters and two thumbnails each), in two
   layouts: spread over twelve months (the usual case: the month is two prefixes among many) and
   all in the current month (the worst case: every object is listed). Baseline: list the whole
   user and add up the month's keys. Objects go in with the local S3 server's bulk fixture loader.

    python bench/media.py
    python bench/media.py --jobs 40 --baseline-jobs 10     # a quick look
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

from bench_database import ROOT, timed
from paste_expiry import bulk_put
from PIL import Image

from blobgc.core.clients import redis_from_env, s3_client_from_env  # noqa: E402
from blobgc.kinds.media.cleanup import drain_thumbnail_queue
from blobgc.kinds.media.layouts import master_key, month_of, rev_month, thumb_key
from blobgc.core.settings import MediaSettings
from blobgc.kinds.media.thumbnail_jobs import PROCESSING, QUEUE

USER = "0001000000000002"


def photo(seed: int, width: int = 3000, height: int = 2000) -> bytes:
    """A photo-like JPEG (a gradient with noise), not a flat color that compresses to nothing."""
    image = Image.radial_gradient("L").resize((width, height)).convert("RGB")
    noise = Image.effect_noise((width, height), 40 + seed % 20).convert("RGB")
    buffer = io.BytesIO()
    Image.blend(image, noise, 0.3).save(buffer, "JPEG", quality=88)
    return buffer.getvalue()


def naive_worker(redis, s3, settings: MediaSettings, n: int) -> int:
    """One job at a time; every size decoded from the full-size image."""
    made = 0
    for _ in range(n):
        raw = redis.rpop(QUEUE)
        if raw is None:
            break
        job = json.loads(raw)
        data = s3.get_object(Bucket=job["bucket"], Key=job["originalKey"])["Body"].read()
        for w, h in settings.image_thumbs:
            image = Image.open(io.BytesIO(data))
            image.load()
            image.thumbnail((w, h), Image.Resampling.LANCZOS)
            buffer = io.BytesIO()
            image.save(buffer, "WEBP", quality=80, method=4)
            s3.put_object(Bucket=job["bucket"], Key=thumb_key(job["originalKey"], w, h), Body=buffer.getvalue(),
                          ContentType="image/webp")
            made += 1
    return made


def bench_thumbnails(settings: MediaSettings, jobs: int, baseline_jobs: int) -> dict:
    s3, redis = s3_client_from_env(), redis_from_env()
    redis.delete(QUEUE, PROCESSING)
    now = datetime.now(timezone.utc)
    bodies = [photo(i) for i in range(8)]
    masters = [master_key(USER, now, "jpg") for _ in range(jobs)]
    for i, key in enumerate(masters):
        s3.put_object(Bucket=settings.images_bucket, Key=key, Body=bodies[i % len(bodies)], ContentType="image/jpeg")

    def enqueue(keys: list[str]) -> None:
        redis.lpush(QUEUE, *[json.dumps({"type": "image", "bucket": settings.images_bucket, "originalKey": k})
                             for k in keys])

    enqueue(masters[:baseline_jobs])
    base_s, base_made = timed(lambda: naive_worker(redis, s3, settings, baseline_jobs))
    enqueue(masters)
    ours_s, result = timed(lambda: drain_thumbnail_queue(redis, s3, settings))
    assert result.jobs == jobs and result.dead_lettered == 0 and redis.llen(PROCESSING) == 0, result
    return {"jobs": jobs, "master_bytes": sum(len(b) for b in bodies) // len(bodies),
            "sizes": [list(s) for s in settings.image_thumbs],
            "baseline_jobs": baseline_jobs, "baseline_s": base_s, "baseline_jobs_per_s": baseline_jobs / base_s,
            "baseline_thumbs_per_s": base_made / base_s,
            "ours_s": ours_s, "jobs_per_s": jobs / ours_s, "thumbs_per_s": result.thumbnails / ours_s,
            "ratio": (jobs / ours_s) / (baseline_jobs / base_s)}


def bench_quota(settings: MediaSettings, objects: int, spread_months: int) -> dict:
    """A user with `objects` objects (a master and two thumbnails each) over `spread_months` months."""
    from demo_app.media import monthly_quota

    s3 = s3_client_from_env()
    user = f"{USER[:-4]}{uuid.uuid4().hex[:4]}"
    this_month = month_of(datetime.now(timezone.utc))
    rows = []
    for i in range(objects // 3):
        year, month = divmod(this_month // 100 * 12 + this_month % 100 - 1 - i % spread_months, 12)
        rev = rev_month(year * 100 + month + 1)
        stem = f"{0xFFFFFFFF - i:08x}{i:08x}"
        rows.append((f"{user}/masters/{rev}/{stem}.jpg", 90_000))
        rows += [(f"{user}/thumbs/{rev}/{stem}_{w}x{h}.webp", 20_000) for w, h in settings.image_thumbs]
    bulk_put(settings.images_bucket, rows)
    rev = rev_month(this_month)

    def whole_user() -> int:
        total = 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=settings.images_bucket, Prefix=f"{user}/"):
            total += sum(o["Size"] for o in page.get("Contents", [])
                         if o["Key"].split("/")[2] == rev and o["Key"].split("/")[1] in ("masters", "thumbs"))
        return total

    whole_user()  # warm-up: moto computes each fixture object's ETag on its first listing
    base_s, base_bytes = timed(whole_user)
    ours_s, quota = timed(lambda: monthly_quota(s3, settings, user, this_month))
    assert quota["used_bytes"] == base_bytes, (quota, base_bytes)
    return {"objects": len(rows), "months": spread_months, "month_objects": quota["masters"] + quota["thumbs"],
            "baseline_s": base_s, "ours_s": ours_s, "ratio": base_s / ours_s, "used_bytes": quota["used_bytes"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--baseline-jobs", type=int, default=40)
    parser.add_argument("--quota-objects", type=int, default=10_000)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "media.json")
    args = parser.parse_args()
    settings = MediaSettings(bucket_prefix=f"bench-{uuid.uuid4().hex[:8]}-")
    s3 = s3_client_from_env()
    s3.create_bucket(Bucket=settings.images_bucket)
    results: dict = {"when": datetime.now(timezone.utc).isoformat(), "cpus": os.cpu_count()}
    print(f"thumbnails: {args.jobs} jobs (baseline: {args.baseline_jobs}) ...", flush=True)
    results["thumbnails"] = t = bench_thumbnails(settings, args.jobs, args.baseline_jobs)
    print(f"quota: a user with {args.quota_objects:,} objects ...", flush=True)
    results["quota"] = [bench_quota(settings, args.quota_objects, months) for months in (12, 1)]

    print(f"\n## thumbnails from media-thumb-queue (masters 3000x2000 JPEG, ~{t['master_bytes'] // 1024} KiB; "
          f"sizes {t['sizes']}, WebP)\n"
          f"baseline (one job at a time, full decode per size): {t['baseline_jobs']} jobs in {t['baseline_s']:.2f}s "
          f"= {t['baseline_jobs_per_s']:.1f} jobs/s ({t['baseline_thumbs_per_s']:.1f} thumbnails/s)\n"
          f"blobgc (batches of 50, 2 threads, draft decode): {t['jobs']} jobs in {t['ours_s']:.2f}s = "
          f"{t['jobs_per_s']:.1f} jobs/s ({t['thumbs_per_s']:.1f} thumbnails/s) = {t['ratio']:.1f}x the baseline")
    print("\n## monthly quota of one user (ratio = whole-user listing / blobgc)")
    for q in results["quota"]:
        print(f"{q['objects']:,} objects over {q['months']:>2} month(s), {q['month_objects']:,} this month: "
              f"blobgc {q['ours_s'] * 1000:7.1f} ms, whole-user listing {q['baseline_s'] * 1000:7.1f} ms, "
              f"{q['ratio']:.1f}x")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nraw figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
