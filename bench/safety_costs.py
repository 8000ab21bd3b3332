#!/usr/bin/env python3
"""What issue 15's safety fixes cost, measured against the shapes they replaced, in the same run.

1. The mark's NULL-safe join against the `id IN (subquery)` it replaced (which a NULL reference turns
   into "unknown"): the dry-run count of one whole pass over `--blobs` blobs, 70% referenced through
   two tables (bench/mark_sweep.py's data), best of three each.
2. The outbox drain counting only objects that exist: owed keys whose size was recorded at write time
   (trusted, no extra call) against keys of unknown size (a thumbnail that may never have been made:
   the drain asks the store first), for keys that are dense in the bucket (every blob is garbage) and
   sparse (one blob in four).

    make up && source .blobgc/env && python bench/safety_costs.py
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

from bench_database import ROOT, fresh_database, vacuum
from mark_sweep import LOAD_APP
from paste_expiry import bulk_put
from psycopg import sql

import blobgc.kinds  # noqa: E402,F401 - installs the kinds (the drain's guards)
from blobgc.core import queries  # noqa: E402
from blobgc.core.clients import pg_connect, s3_client_from_env  # noqa: E402
from blobgc.core.outbox import delete_owed_objects, record_deletions  # noqa: E402
from blobgc.core.references import discover_references, referenced_ids_query  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402

# The mark's select before issue 15: `c.id IN (referenced)` is unknown when the referenced ids hold a NULL.
IN_SUBQUERY_MARKS = """
SELECT c.id, c.unused,
       c.unused = (c.id IN ({referenced})) AS flip_unused,
       (c.visibility = 'PUBLIC') <> (c.id IN (
           SELECT p.blob_id FROM app.page_using_blob p
           WHERE p.in_use AND (%(lo)s::text IS NULL OR p.blob_id >= %(lo)s) AND (%(hi)s::text IS NULL OR p.blob_id < %(hi)s)
       )) AS flip_visibility
FROM app.blob c
WHERE (%(lo)s::text IS NULL OR c.id >= %(lo)s) AND (%(hi)s::text IS NULL OR c.id < %(hi)s)
"""


def bench_mark(dsn: str, n: int) -> dict:
    conn = pg_connect(dsn)
    with conn.transaction():
        for statement in LOAD_APP.split(";"):
            if statement.strip():
                conn.execute(statement, {"n": n})
    vacuum(conn, "app.blob", "app.blob_attachment", "app.page_using_blob")
    referenced = referenced_ids_query(discover_references(conn, "app.blob"), "range")
    count = queries.load("mark/count_blob_marks", "blobgc.kinds.blobs")
    shapes = {"in_subquery": sql.SQL(IN_SUBQUERY_MARKS).format(referenced=referenced),
              "null_safe_join": sql.SQL(queries.load("mark/select_blob_marks", "blobgc.kinds.blobs")).format(referenced=referenced)}
    out: dict = {"blobs": n}
    for _ in range(3):
        for name, marks in shapes.items():
            started = time.perf_counter()
            flips = conn.execute(sql.SQL(count).format(marks=marks), {"lo": None, "hi": None}).fetchone()
            out.setdefault(name, []).append(time.perf_counter() - started)
            out[f"{name}_flips"] = list(flips)
    assert out["in_subquery_flips"] == out["null_safe_join_flips"], out
    for name in shapes:
        out[f"{name}_s"] = min(out.pop(name))
    out["ratio"] = out["in_subquery_s"] / out["null_safe_join_s"]
    conn.close()
    return out


def bench_drain(dsn: str, blobs: int, stride: int, sizes_known: bool) -> dict:
    """Owe the raw object and the thumbnail of every `stride`-th of `blobs` stored blobs, then drain them."""
    s3, conn = s3_client_from_env(), pg_connect(dsn)
    bucket = f"bench-safety-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    ids = [f"{i:08d}" for i in range(blobs)]
    bulk_put(bucket, [(f"blobs/{i}/{kind}", 1024) for i in ids for kind in ("raw", "thumbnail")])
    chosen = ids[::stride]
    run = ensure_run(conn, RunRef("bench_safety", f"drain-{uuid.uuid4().hex[:8]}"))
    with conn.transaction():
        for start in range(0, len(chosen), 500):
            part = chosen[start:start + 500]
            record_deletions(conn, run, source="bench.objects", bucket=bucket,
                             keys=[f"blobs/{i}/{kind}" for i in part for kind in ("raw", "thumbnail")],
                             sizes=[size for _ in part for size in (1024, 1024 if sizes_known else None)])
    started = time.perf_counter()
    drained = delete_owed_objects(conn, s3, run, workers=2, connect=lambda: pg_connect(dsn))
    seconds = time.perf_counter() - started
    assert drained.objects_deleted == 2 * len(chosen) and drained.owed_after == 0, drained
    conn.close()
    return {"stride": stride, "sizes_known": sizes_known, "objects": drained.objects_deleted, "seconds": seconds,
            "objects_per_s": drained.objects_deleted / seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blobs", type=int, default=1_000_000, help="blobs for the mark comparison")
    parser.add_argument("--drain-blobs", type=int, default=8_000, help="stored blobs (2 objects each) per drain")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "safety_costs.json"))
    args = parser.parse_args()
    dsn = fresh_database()
    print(f"mark: NULL-safe join against IN (subquery), {args.blobs:,} blobs ...", flush=True)
    mark = bench_mark(dsn, args.blobs)
    print("drain: recorded sizes against sizes asked of the store ...", flush=True)
    drains = [bench_drain(dsn, args.drain_blobs, stride, known) for stride in (1, 4) for known in (True, False)]
    print(f"\n## mark, one dry-run pass over {mark['blobs']:,} blobs (best of 3)")
    print(f"IN (subquery), before: {mark['in_subquery_s']:.3f}s; NULL-safe join, now: {mark['null_safe_join_s']:.3f}s "
          f"(ratio before/now {mark['ratio']:.2f})")
    print("\n## outbox drain, end to end (2 drains side by side)")
    for d in drains:
        print(f"every {d['stride']} blob(s), sizes {'recorded' if d['sizes_known'] else 'asked of the store'}: "
              f"{d['objects']:,} objects in {d['seconds']:.2f}s = {d['objects_per_s']:,.0f} objects/s")
    by = {(d["stride"], d["sizes_known"]): d["objects_per_s"] for d in drains}
    for stride in (1, 4):
        print(f"every {stride}: asking costs x{by[(stride, True)] / by[(stride, False)]:.1f} in throughput")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mark": mark, "drains": drains}, indent=2))
    print(f"\nraw figures: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
