#!/usr/bin/env python3
"""What the sweep's "why not planned" count costs (issue 30): one set-based pass per id range, beside the plan.

Data: `bench/mark_sweep.py`'s (N blobs, 70% referenced), in app.blob (app_blob: its own `unused` and
`updated_at`) and in `owned.blob` (a collection whose marks live in `blobgc.mark_owned_blobs`), both marked,
then backdated in SQL as if the mark had found the unused rows two days ago, so that 30% of the rows plan.

- **Count** (`blobgc.collectors.sweep.count_not_planned`, which every plan task runs first): each row in
  exactly one of referenced, not marked, within grace, young created_at, planned, with the earliest time one
  becomes eligible.
- **Baseline**: the plan of the same id ranges (`plan_collection` without its count, as 1.5.0 planned), measured
  in the same run. The figure is the count's time as a share of the plan's.

    make up && source .blobgc/env && python bench/not_planned.py            # 1M rows
    python bench/not_planned.py --rows 100000                                # a quick look
"""
from __future__ import annotations

import argparse
import contextlib
import uuid
from datetime import timedelta
from unittest import mock

from bench_database import fresh_database, timed, vacuum
from mark_sweep import LOAD_APP, LOAD_OWNED, OWNED

from blobgc.collectors import sweep  # noqa: E402
from blobgc.collectors.mark import mark_collection, mark_in_columns  # noqa: E402
from blobgc.core.clients import pg_connect  # noqa: E402
from blobgc.core.collections import bind  # noqa: E402
from blobgc.kinds.blobs import bound_app_blob  # noqa: E402
from blobgc.core.key_space import split_key_space  # noqa: E402
from blobgc.core.plans import PLAN_MAX_AGE_HOURS, fix_plan  # noqa: E402
from blobgc.core.references import discover_references  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402

GRACE = timedelta(hours=24)


def load(conn, rows: int) -> None:
    with conn.transaction():
        for text in (LOAD_APP, LOAD_OWNED):
            for statement in text.split(";"):
                if statement.strip():
                    conn.execute(statement, {"n": rows})
    vacuum(conn, "app.blob", "app.blob_attachment", "app.page_using_blob", "owned.blob", "owned.attachment",
           "owned.page_use")


def plan_ranges(conn, bound, refs, ranges, *, count: bool) -> int:
    """Plan every id range of `bound` in a new run (with the count, or without it as 1.5.0 planned): rows planned."""
    run = ensure_run(conn, RunRef("blobgc_sweep", f"bench-{uuid.uuid4().hex[:8]}"))
    fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
    cutoff = run.reference_time - GRACE
    empty = {n: 0 for n in sweep.NOT_PLANNED_COUNTS} | {"first_eligible_at": None}
    without = mock.patch.object(sweep, "count_not_planned", lambda *a, **k: dict(empty))
    with contextlib.nullcontext() if count else without:
        return sum(sweep.plan_collection(conn, run, bound, refs, cutoff=cutoff, key_range=r).rows_deleted
                   for r in ranges)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ranges", type=int, default=2, help="id ranges per collection (Param sweep_workers)")
    args = parser.parse_args()
    conn = pg_connect(fresh_database())
    load(conn, args.rows)
    app, app_refs = bound_app_blob("bench"), discover_references(conn, "app.blob")
    owned = bind(conn, OWNED, default_bucket="bench")
    owned_refs = discover_references(conn, OWNED.table, id_column=OWNED.id)
    mark_in_columns(conn, bound_app_blob(""), app_refs)
    mark_collection(conn, owned, owned_refs)
    # as if the mark had found the unused rows two days ago (backdated in SQL: time is never faked forward)
    conn.execute("UPDATE app.blob SET updated_at = now() - interval '2 days', created_at = now() - interval '2 days'")
    conn.execute("UPDATE blobgc.mark_owned_blobs SET unused_since = now() - interval '2 days'")
    conn.execute("UPDATE owned.blob SET created_at = now() - interval '2 days'")
    vacuum(conn, "app.blob", "owned.blob", "blobgc.mark_owned_blobs")
    print(f"{args.rows:,} rows per collection, 70% referenced, {args.ranges} id ranges each")
    for name, bound, refs in (("app_blob", app, app_refs), ("owned_blobs (mark table)", owned, owned_refs)):
        ranges = split_key_space(conn, args.ranges, bound.id_column)
        cutoff = conn.execute("SELECT now() - interval '24 hours'").fetchone()[0]
        sweep.count_not_planned(conn, bound, refs, cutoff=cutoff, grace=GRACE, key_range=ranges[0])  # warm
        count_s, counts = timed(lambda: sweep.merge_not_planned(
            {name: sweep.count_not_planned(conn, bound, refs, cutoff=cutoff, grace=GRACE, key_range=r)}
            for r in ranges))
        plan_s, planned = timed(lambda: plan_ranges(conn, bound, refs, ranges, count=False))
        (entry,) = counts.values()
        assert entry["planned"] == planned, (entry, planned)
        print(f"{name}: count {count_s:.2f} s, plan without it (1.5.0) {plan_s:.2f} s: the count adds "
              f"{100 * count_s / plan_s:.0f}% (x{(plan_s + count_s) / plan_s:.2f} of the baseline); "
              f"planned {planned:,} = counted {entry['planned']:,}; considered {entry['considered']:,}, "
              f"referenced {entry['referenced']:,}")
    conn.close()


if __name__ == "__main__":
    main()
