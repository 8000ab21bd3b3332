#!/usr/bin/env python3
"""Benchmark seed 001: crop-resize-split of a 24-megapixel JPEG, and the crawler's cache-hit path.

crop-resize-split: `blobgc.image_processing.render_sizes` (one decode, at a reduced DCT scale
where the sizes allow, each size cut from the previous one, the untouched original kept) against
the naive way (`render_sizes_naively`: a full decode and a resize from full size for every
size), on the same photo in the same run, into the four default sizes. Also timed: a photo whose
EXIF orientation forces re-encoding the original (so the full decode cannot be avoided).

Cache hits: `blobgc.images.crawl` end to end against the local stack's PostgreSQL, on URLs all
seen within the cache window, in batches of `--batch` URLs (one lookup and a few set-based
writes per batch): branch 2 (bound elsewhere: new rows), re-runs (unchanged) and branch 3 (rebind).

    make up && source .blobgc/env && python bench/images.py
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import requests
from bench_database import ROOT, fresh_database, timed
from PIL import Image

from blobgc.core.clients import pg_connect  # noqa: E402
from demo_app.image_processing import DEFAULT_SIZES, render_sizes, render_sizes_naively  # noqa: E402
from blobgc.kinds.images.crawler import CrawlItem, crawl, md5_hex  # noqa: E402
from demo_app.images import ImageSettings  # noqa: E402


def photo_24mp(orientation: int | None = None) -> bytes:
    """A 6000x4000 JPEG with texture (noise over gradients), about what a camera writes."""
    base = Image.linear_gradient("L").resize((6000, 4000))
    noise = Image.effect_noise((6000, 4000), 40)
    image = Image.merge("RGB", (base, noise, Image.eval(base, lambda v: 255 - v)))
    out = io.BytesIO()
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    image.save(out, "JPEG", quality=90, exif=exif.tobytes())
    return out.getvalue()


def bench_cut(repeats: int) -> dict:
    results = {}
    for label, data in (("upright", photo_24mp()), ("rotated (EXIF 6)", photo_24mp(6))):
        ours = [timed(lambda d=data: render_sizes(d, DEFAULT_SIZES))[0] for _ in range(repeats)]
        naive = [timed(lambda d=data: render_sizes_naively(d, DEFAULT_SIZES))[0] for _ in range(repeats)]
        results[label] = {"bytes": len(data), "ours_s": statistics.median(ours), "naive_s": statistics.median(naive),
                          "ratio": statistics.median(naive) / statistics.median(ours)}
    return results


def bench_cache_hits(n_urls: int, batch: int) -> dict:
    dsn = fresh_database()
    conn = pg_connect(dsn)
    urls = [f"https://partner.example/photos/{i}.jpg" for i in range(n_urls)]
    with conn.transaction():
        conn.execute("INSERT INTO app.offer (id) SELECT g FROM generate_series(1, 4) g")
        # every URL already crawled for offer 1 (as branch 1 would have left it)
        conn.execute(
            "INSERT INTO app.image (image_id, offer_id, url_hash, body_hash, num) "
            "SELECT md5('img' || u), 1, h, md5('body' || u), 1 FROM unnest(%s::text[], %s::text[]) AS x(u, h)",
            (urls, [md5_hex(u) for u in urls]))
    conn.execute("VACUUM ANALYZE app.image")
    settings = ImageSettings(bucket="unused: every URL is a cache hit")
    seen_since = datetime.now(timezone.utc) - timedelta(days=14)
    out: dict = {"urls": n_urls, "batch": batch}

    def crawl_all(offer_id: int) -> dict[str, int]:
        counts: dict[str, int] = {}
        with requests.Session() as session:
            for start in range(0, n_urls, batch):
                items = [CrawlItem(i, offer_id, urls[i], 1) for i in range(start, min(n_urls, start + batch))]
                for outcome in crawl(conn, None, session, settings, items, seen_since=seen_since).values():
                    counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
        return counts

    for label, offer_id, expect in (("branch 2: bound elsewhere, new rows", 2, "linked"),
                                    ("re-run: already bound, unchanged", 2, "unchanged")):
        seconds, counts = timed(lambda o=offer_id: crawl_all(o))
        assert counts == {expect: n_urls}, counts
        out[label] = {"seconds": seconds, "urls_per_s": n_urls / seconds}
    with conn.transaction():
        conn.execute("DELETE FROM app.image WHERE offer_id = 1")
        conn.execute("DELETE FROM app.offer WHERE id = 2")  # ON DELETE SET NULL: offer 2's rows are unbound
    conn.execute("VACUUM ANALYZE app.image")
    seconds, counts = timed(lambda: crawl_all(4))
    assert counts == {"rebound": n_urls}, counts
    out["branch 3: unbound rows, rebound"] = {"seconds": seconds, "urls_per_s": n_urls / seconds}
    conn.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--urls", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "images.json")
    args = parser.parse_args()
    results = {"when": datetime.now(timezone.utc).isoformat()}
    print(f"crop-resize-split, 24 MP JPEG into {DEFAULT_SIZES} (median of {args.repeats}) ...", flush=True)
    started = time.perf_counter()
    results["cut"] = bench_cut(args.repeats)
    print(f"cache hits: {args.urls:,} URLs in batches of {args.batch} ...", flush=True)
    results["cache_hits"] = bench_cache_hits(args.urls, args.batch)

    print("\n## crop-resize-split (seconds per photo; ratio = naive / blobgc)")
    for label, r in results["cut"].items():
        print(f"{label:<18} {r['bytes'] / 1e6:5.1f} MB  naive {r['naive_s']:6.3f}s  blobgc {r['ours_s']:6.3f}s  "
              f"{r['ratio']:5.1f}x")
    print(f"\n## cache hits ({args.urls:,} URLs, batches of {args.batch}, end to end through blobgc.images.crawl)")
    for label, r in results["cache_hits"].items():
        if isinstance(r, dict):
            print(f"{label:<40} {r['seconds']:6.2f}s  {r['urls_per_s']:8,.0f} URLs/s")
    print(f"\n(total {time.perf_counter() - started:.0f}s)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"raw figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
