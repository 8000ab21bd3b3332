#!/usr/bin/env python3
"""Benchmark seed 003's generation-based collection against the local stack (`make up; source .blobgc/env`).

1. **The bloom filter alone** over `--filter-refs` references (default 10,000,000): blob ids as
   `store_blob` makes them, added in pages of 50,000 with the run's salt, as the collector does.
   Prints the build rate, the filter's memory (its bit array, and the process's RSS growth while
   building it), and the measured false-positive rate on ids that were never added.
2. **A GC iteration over `--deletions` deletions** (default 1,000,000) against the real stack:
   generation 1 holds 1,000,000 blobs; half of them have two deletion rows each (a mail sent to two
   users, both copies deleted), and a fifth of those are still referenced by a third copy. The
   other half are live. Generation 3 holds another 1,000,000 live blobs with references (so the
   reference table is not just the generation being collected). The unreferenced blobs' objects
   are in the S3 server. Timed: the DAG's tasks as they call the library: `open_generation`,
   `plan_collection`, `collect` for each eligible generation, and `delete_owed_objects` (2 drains).
3. **Baseline**, in the same run and database: the seed's algorithm one blob at a time (per blob
   with a deletion: one query for its references, then one transaction deleting the blob and its
   deletions, and one S3 DeleteObject), on `--baseline-deletions` deletions in generation 2.

Rows are loaded with SQL and objects with the local S3 server's bulk fixture loader (moto stores
~150 PUTs/s). Objects are 200-2,000 bytes: moto keeps every body in its memory, and with bodies
of 1-51 KB (10 GB in moto) its DeleteObjects ran at a third of its speed. Apache James's published figures (10M mails/hour, filter built at 40M/hour) are
printed beside ours; they were measured on other hardware, with Cassandra and S3.

    python bench/generations.py                                   # 10M filter, 1M deletions
    python bench/generations.py --filter-refs 1000000 --deletions 100000    # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

from bench_database import ROOT, fresh_database, objects_present, timed, vacuum
from paste_expiry import bulk_put

sys.path.insert(0, str(ROOT))  # tests.support.gated: plan, the gate, execute, as a DAG run does

from blobgc.core.clients import pg_connect, s3_client_from_env  # noqa: E402
from blobgc.core.outbox import delete_owed_objects  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402
from blobgc.kinds.generations.collector import (  # noqa: E402
    SCAN_PAGE,
    ReferenceFilter,
    build_reference_filter,
    eligible_generations,
    open_generation,
)
from blobgc.kinds.generations.layouts import mail_key  # noqa: E402
from tests.support.gated import collect_generations  # noqa: E402

DAG = "blobgc_generations"
OUTBOX_DRAINS = 2  # as the DAG's delete_owed_objects task
COLLECT_WORKERS = 2  # as the DAG's collect task
JAMES_MAILS_PER_HOUR = 10_000_000
JAMES_FILTER_PER_HOUR = 40_000_000
BLOB_ID = "encode(sha256(('mail ' || {g} || ' of {gen}')::bytea), 'hex') || '-g{gen}'"

# generation 1: blobs 1..n. Blobs 1..candidates have two deletion rows each; among them, those with
# i % 5 = 0 keep a reference (a third copy). Blobs above `candidates` are live, one reference each.
LOAD = [
    "INSERT INTO gen.generation (id) SELECT generate_series(1, 3)",
    f"""INSERT INTO gen.blob (blob_id, generation, size_bytes)
        SELECT {BLOB_ID.format(g="g", gen=1)}, 1, 200 + (g::bigint * 7919) %% 1800 FROM generate_series(1, %(blobs)s) g""",
    f"""INSERT INTO gen.deletion (blob_id, generation, deleted_at, gc_iteration)
        SELECT {BLOB_ID.format(g="g", gen=1)}, 1, now() - interval '2 days', 2 + c
        FROM generate_series(1, %(candidates)s) g, generate_series(0, 1) c""",
    f"""INSERT INTO gen.reference (owner_id, blob_id, generation)
        SELECT 'copy-' || g, {BLOB_ID.format(g="g", gen=1)}, 1 FROM generate_series(1, %(candidates)s) g
        WHERE g %% 5 = 0""",
    f"""INSERT INTO gen.reference (owner_id, blob_id, generation)
        SELECT 'mail-' || g, {BLOB_ID.format(g="g", gen=1)}, 1 FROM generate_series(%(candidates)s + 1, %(blobs)s) g""",
    f"""INSERT INTO gen.blob (blob_id, generation, size_bytes)
        SELECT {BLOB_ID.format(g="g", gen=3)}, 3, 2000 FROM generate_series(1, %(blobs)s) g""",
    f"""INSERT INTO gen.reference (owner_id, blob_id, generation)
        SELECT 'new-' || g, {BLOB_ID.format(g="g", gen=3)}, 3 FROM generate_series(1, %(blobs)s) g""",
]
# the baseline's sample, in generation 2: the same shape, small
LOAD_SAMPLE = [
    f"""INSERT INTO gen.blob (blob_id, generation, size_bytes)
        SELECT {BLOB_ID.format(g="g", gen=2)}, 2, 1000 FROM generate_series(1, %(candidates)s) g""",
    f"""INSERT INTO gen.deletion (blob_id, generation, deleted_at, gc_iteration)
        SELECT {BLOB_ID.format(g="g", gen=2)}, 2, now() - interval '1 day', 3
        FROM generate_series(1, %(candidates)s) g, generate_series(0, 1) c""",
    f"""INSERT INTO gen.reference (owner_id, blob_id, generation)
        SELECT 'copy-' || g, {BLOB_ID.format(g="g", gen=2)}, 2 FROM generate_series(1, %(candidates)s) g
        WHERE g %% 5 = 0""",
]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def bench_filter(n: int, rate: float) -> dict:
    """Build a salted filter over `n` blob ids in the collector's pages; check its false positives."""
    ids = [f"{(i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % (1 << 256):064x}-g7" for i in range(n)]
    before = rss_mb()
    refs = ReferenceFilter.empty(n, rate)

    def build() -> None:
        for start in range(0, n, SCAN_PAGE):
            refs.add(ids[start:start + SCAN_PAGE])

    seconds, _ = timed(build)
    grown = rss_mb() - before
    probe = min(n, 1_000_000)
    missing = sum(1 for b in ids[:probe] if b not in refs)
    strangers = [f"{(i * 0x9E3779B97F4A7C15) % (1 << 256):064x}-g8" for i in range(probe)]
    check_s, false_positives = timed(lambda: sum(1 for b in strangers if b in refs))
    return {"references": n, "rate": rate, "build_s": seconds, "per_s": n / seconds,
            "filter_mb": refs.size_bytes / 1e6, "mb_per_million": refs.size_bytes / 1e6 / (n / 1e6),
            "rss_growth_mb": grown, "false_negatives": missing, "probed": probe,
            "false_positive_rate": false_positives / probe, "check_per_s": probe / check_s}


def load(dsn: str, bucket: str, blobs: int, candidates: int, sample: int) -> dict:
    conn = pg_connect(dsn)
    params = {"blobs": blobs, "candidates": candidates}
    seconds, _ = timed(lambda: [conn.execute(s, params) for s in LOAD])
    seconds_sample, _ = timed(lambda: [conn.execute(s, {"candidates": sample}) for s in LOAD_SAMPLE])
    vacuum(conn, "gen.blob", "gen.reference", "gen.deletion")
    print(f"  rows loaded in {seconds + seconds_sample:.1f}s", flush=True)
    doomed = conn.execute(
        "SELECT b.blob_id, b.size_bytes FROM gen.blob b WHERE b.generation IN (1, 2) "
        "AND EXISTS (SELECT 1 FROM gen.deletion d WHERE d.blob_id = b.blob_id) "
        "AND NOT EXISTS (SELECT 1 FROM gen.reference r WHERE r.blob_id = b.blob_id)").fetchall()
    live = conn.execute("SELECT blob_id, size_bytes FROM gen.blob WHERE generation = 1 AND "
                        "EXISTS (SELECT 1 FROM gen.reference r WHERE r.blob_id = gen.blob.blob_id) LIMIT 2000"
                        ).fetchall()
    objects = [(mail_key(b), size) for b, size in doomed + live]

    def put(start: int) -> None:
        bulk_put(bucket, objects[start:start + 10_000])

    with ThreadPoolExecutor(2) as pool:
        seconds, _ = timed(lambda: list(pool.map(put, range(0, len(objects), 10_000))))
    print(f"  {len(objects):,} objects stored in {seconds:.1f}s", flush=True)
    counts = dict(conn.execute("SELECT generation, count(*) FROM gen.deletion GROUP BY 1").fetchall())
    refs = conn.execute("SELECT count(*) FROM gen.reference").fetchone()[0]
    conn.close()
    return {"blobs_per_generation": blobs, "deletions": counts.get(1, 0), "sample_deletions": counts.get(2, 0),
            "references": refs, "unreferenced_with_deletions": len(doomed), "objects": len(objects),
            "live_sample": [k for k, _ in objects[len(doomed):]],
            "doomed_sample": [mail_key(b) for b, _ in doomed[:500] if b.endswith("-g1")]}


def baseline(dsn: str, s3, bucket: str) -> dict:
    """The seed's algorithm one blob at a time, on generation 2's sample."""
    conn = pg_connect(dsn)
    candidates = [r[0] for r in conn.execute("SELECT DISTINCT blob_id FROM gen.deletion WHERE generation = 2")]
    deletions = conn.execute("SELECT count(*) FROM gen.deletion WHERE generation = 2").fetchone()[0]

    def one_at_a_time() -> int:
        deleted = 0
        for blob_id in candidates:
            if conn.execute("SELECT 1 FROM gen.reference WHERE blob_id = %s LIMIT 1", (blob_id,)).fetchone():
                continue
            with conn.transaction():
                conn.execute("DELETE FROM gen.blob WHERE blob_id = %s", (blob_id,))
                conn.execute("DELETE FROM gen.deletion WHERE blob_id = %s", (blob_id,))
            s3.delete_object(Bucket=bucket, Key=mail_key(blob_id))
            deleted += 1
        return deleted

    seconds, deleted = timed(one_at_a_time)
    conn.close()
    return {"deletions": deletions, "blobs": len(candidates), "blobs_deleted": deleted, "seconds": seconds,
            "deletions_per_s": deletions / seconds}


def ours(dsn: str, s3, bucket: str, rate: float) -> dict:
    conn = pg_connect(dsn)
    run = RunRef(DAG, f"bench-{uuid.uuid4().hex[:8]}")
    ensure_run(conn, run)
    scan_s, refs = timed(lambda: build_reference_filter(conn, 1, rate))  # the scan alone, for its rate
    open_s, opened = timed(lambda: open_generation(conn, run))
    plan_s, generations = timed(lambda: eligible_generations(conn, opened))
    # plan every generation, then execute the plan (in the DAG: mapped tasks on either side of the gate)
    collect_s, collected = timed(lambda: collect_generations(
        conn, run, generations, approved_by="bench",
            collectable=opened.collectable, bucket=bucket, false_positive_rate=rate,
        workers=COLLECT_WORKERS, connect=lambda: pg_connect(dsn)))
    drain_s, drained = timed(lambda: delete_owed_objects(conn, s3, run, workers=OUTBOX_DRAINS,
                                                         connect=lambda: pg_connect(dsn)))
    conn.close()
    main = collected[1]
    database_s = open_s + plan_s + collect_s
    return {"generations": generations, "opened": opened.generation, "scan_s": scan_s,
            "scan_references": refs.references, "scan_per_s": refs.references / scan_s,
            "open_s": open_s, "plan_s": plan_s, "collect_s": collect_s, "drain_s": drain_s,
            "database_s": database_s, "total_s": database_s + drain_s,
            "collected": {g: r.to_xcom() for g, r in collected.items()},
            "references_scanned": main.references_scanned, "filter_bytes": main.filter_bytes,
            "candidates": main.candidates, "blobs_deleted": main.blobs_deleted, "blobs_kept": main.blobs_kept,
            "deletions_cleared": sum(r.deletions_cleared for r in collected.values()),
            "objects_deleted": drained.objects_deleted, "objects_failed": drained.failed,
            "owed_after": drained.owed_after}


def verify(dsn: str, s3, bucket: str, data: dict) -> dict:
    """Nothing referenced lost; every unreferenced blob either gone with its object, or kept (a false
    positive) with its object and its deletions, for the next run."""
    conn = pg_connect(dsn)
    left = dict(conn.execute("SELECT generation, count(*) FROM gen.blob GROUP BY 1").fetchall())
    deletions = dict(conn.execute("SELECT generation, count(*) FROM gen.deletion GROUP BY 1").fetchall())
    dangling = conn.execute("SELECT count(*) FROM gen.reference r WHERE NOT EXISTS "
                            "(SELECT 1 FROM gen.blob b WHERE b.blob_id = r.blob_id)").fetchone()[0]
    kept_garbage = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT 1 FROM gen.deletion d WHERE d.blob_id = b.blob_id)) "
        "FROM gen.blob b WHERE b.generation = 1 AND b.blob_id = ANY(%s) AND NOT EXISTS "
        "(SELECT 1 FROM gen.reference r WHERE r.blob_id = b.blob_id)",
        ([k[len("mail/"):] for k in data["doomed_sample"]],)).fetchone()
    still_rows = {r[0] for r in conn.execute("SELECT blob_id FROM gen.blob WHERE blob_id = ANY(%s)",
                                             ([k[len("mail/"):] for k in data["doomed_sample"]],))}
    conn.close()
    gone = [k for k in data["doomed_sample"] if k[len("mail/"):] not in still_rows]
    false_positives = [k for k in data["doomed_sample"] if k[len("mail/"):] in still_rows]
    gone_present = objects_present(s3, bucket, gone)
    fp_present = objects_present(s3, bucket, false_positives)
    live_present = objects_present(s3, bucket, data["live_sample"])
    result = {"blobs_left": left, "deletions_left": deletions, "dangling_references": dangling,
              "sample_deleted": len(gone), "sample_deleted_present": gone_present,
              "sample_false_positives": len(false_positives), "sample_false_positives_present": fp_present,
              "sample_false_positives_with_deletions": kept_garbage[1], "live_sample_present": live_present}
    assert dangling == 0 and gone_present == 0 and live_present == len(data["live_sample"]), result
    assert fp_present == len(false_positives) == kept_garbage[0] == kept_garbage[1], result
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--filter-refs", type=int, default=10_000_000)
    parser.add_argument("--deletions", type=int, default=1_000_000, help="deletion rows in the collected generation")
    parser.add_argument("--baseline-deletions", type=int, default=2_000)
    parser.add_argument("--rate", type=float, default=0.01, help="false_positive_rate (the DAG's default)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "generations.json")
    args = parser.parse_args()
    results: dict = {"when": datetime.now(timezone.utc).isoformat(), "cpus": os.cpu_count()}

    candidates = args.deletions // 2
    dsn = fresh_database()
    s3 = s3_client_from_env()
    bucket = f"bench-gen-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    print(f"loading 2 x {2 * candidates:,} blobs, {args.deletions:,} deletions ...", flush=True)
    results["data"] = load(dsn, bucket, 2 * candidates, candidates, args.baseline_deletions // 2)
    print(f"baseline: the seed's algorithm one blob at a time over {args.baseline_deletions:,} deletions ...",
          flush=True)
    results["baseline"] = baseline(dsn, s3, bucket)
    with pg_connect(dsn) as conn:
        vacuum(conn, "gen.blob", "gen.reference", "gen.deletion")
    print("blobgc: open_generation, plan_collection, collect, delete_owed_objects ...", flush=True)
    results["blobgc"] = ours(dsn, s3, bucket, args.rate)
    results["verified"] = verify(dsn, s3, bucket, results["data"])
    o, b, d = results["blobgc"], results["baseline"], results["data"]
    results["ratio"] = (d["deletions"] / o["total_s"]) / b["deletions_per_s"]
    print(f"bloom filter alone: {args.filter_refs:,} references ...", flush=True)
    results["filter"] = f = bench_filter(args.filter_refs, args.rate)

    print(f"\n## bloom filter (rbloom {version('rbloom')}, salted, pages of {SCAN_PAGE:,}; p = {f['rate']})\n"
          f"{f['references']:,} references in {f['build_s']:.2f}s = {f['per_s']:,.0f} references/s "
          f"= {f['per_s'] * 3600 / 1e6:,.0f}M/hour (James: {JAMES_FILTER_PER_HOUR // 1_000_000}M/hour)\n"
          f"memory: {f['filter_mb']:.2f} MB of bits = {f['mb_per_million']:.3f} MB per million "
          f"(RSS grew {f['rss_growth_mb']:.1f} MB while building)\n"
          f"checked {f['probed']:,} members: {f['false_negatives']} missing; {f['probed']:,} strangers: "
          f"{f['false_positive_rate']:.4%} false positives; lookups {f['check_per_s']:,.0f}/s")
    print(f"\n## data\ngeneration 1: {d['blobs_per_generation']:,} blobs, {d['deletions']:,} deletions over "
          f"{d['deletions'] // 2:,} blobs ({d['unreferenced_with_deletions'] - b['blobs_deleted']:,} unreferenced); "
          f"generation 3: {d['blobs_per_generation']:,} live blobs; {d['references']:,} references in all; "
          f"{d['objects']:,} objects in S3")
    print(f"\n## baseline: the seed's algorithm one blob at a time (generation 2's sample)\n"
          f"{b['deletions']:,} deletions ({b['blobs']:,} blobs, {b['blobs_deleted']:,} deleted) in "
          f"{b['seconds']:.2f}s = {b['deletions_per_s']:,.0f} deletions/s")
    print(f"\n## blobgc: one GC iteration (opens generation {o['opened']}, collects generations {o['generations']})\n"
          f"reference scan alone    {o['scan_s']:7.2f}s  {o['scan_references']:,} references from PostgreSQL "
          f"= {o['scan_per_s']:,.0f}/s\n"
          f"open_generation         {o['open_s']:7.2f}s\n"
          f"plan_collection         {o['plan_s']:7.2f}s\n"
          f"plan + execute          {o['collect_s']:7.2f}s  (generations {o['generations']}; generation 1: "
          f"{o['references_scanned']:,} references in a {o['filter_bytes'] / 1e6:.2f} MB filter, "
          f"{o['candidates']:,} blobs with deletions, {o['blobs_deleted']:,} deleted, {o['blobs_kept']:,} kept, "
          f"{o['deletions_cleared']:,} deletions cleared)\n"
          f"delete_owed_objects     {o['drain_s']:7.2f}s  {o['objects_deleted']:,} objects "
          f"({o['objects_deleted'] / o['drain_s']:,.0f}/s), {o['objects_failed']} failed, {o['owed_after']} owed\n"
          f"iteration               {o['total_s']:7.2f}s  for {d['deletions']:,} deletions = "
          f"{d['deletions'] / o['total_s']:,.0f} deletions/s = {d['deletions'] / o['total_s'] * 3600 / 1e6:,.0f}M/hour "
          f"(James: {JAMES_MAILS_PER_HOUR // 1_000_000}M mails/hour) = {results['ratio']:.0f}x the baseline")
    v = results["verified"]
    print(f"\nverified: blobs left per generation {v['blobs_left']}, deletions left {v['deletions_left']} "
          f"(the still-referenced blobs'); {v['dangling_references']} references to a deleted blob; "
          f"of {len(d['doomed_sample'])} unreferenced blobs sampled, {v['sample_deleted']} deleted "
          f"({v['sample_deleted_present']} objects left in S3) and {v['sample_false_positives']} kept as false "
          f"positives (with their objects and deletions); {v['live_sample_present']}/{len(d['live_sample'])} live "
          f"keys present")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    results["data"] = {k: v for k, v in d.items() if not k.endswith("_sample")}
    args.json.write_text(json.dumps(results, indent=2, default=str))
    print(f"\nraw figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
