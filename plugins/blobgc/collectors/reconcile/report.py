"""A reconcile run's report, from its checkpoints: its totals (`summarize`) and what it did not plan and why.

The report says what was not planned and why (`not_planned`), per collection (seed layouts, unknown keys and
inventories per bucket): the objects considered, those a row accounts for, those too young for the age floor
(and when the first becomes eligible), those of no known layout, the orphans planned, and the orphans waiting for
confirmation (found orphaned on fewer consecutive real runs than Param `confirmations`).
"""

from __future__ import annotations

import logging
from datetime import UTC
from typing import Any

import psycopg

from blobgc.core import queries
from blobgc.core.runs import RunRef

log = logging.getLogger(__name__)


def not_planned(conn: psycopg.Connection, run: RunRef) -> dict[str, dict]:
    """What the run considered and did not plan, per collection (a seed layout's keys, and keys of no known layout,
    under their bucket; an inventory's per bucket), logged one plain line each: the objects listed (or read from
    the inventory), those a row accounts for, those too young for the age floor (and when the first of them
    becomes eligible), those of no known layout (reported, never deleted), and the orphans planned."""
    found: dict[str, dict] = {}
    for scope, from_inventory, considered, accounted, too_young, first, planned, unknown, waiting in conn.execute(
        queries.load("reconcile/summarize_not_planned"), {"run_id": run.run_id}
    ):
        first = first.astimezone(UTC) if first else None
        found[scope] = {
            "considered": int(considered),
            "accounted": int(accounted),
            "too_young": int(too_young),
            "first_eligible_at": first.isoformat() if first else None,
            "planned": int(planned),
            "unknown": int(unknown),
            "waiting": int(waiting),
        }
        eligible = f" (the first becomes eligible {first:%Y-%m-%d %H:%M} UTC)" if first else ""
        waits = f", {waiting} orphans waiting for confirmation (found on too few real runs in a row)" if waiting else ""
        log.info(
            "%s: %d objects %s, %d accounted for by rows, %d younger than the floor%s, %d of no known layout "
            "(reported, never deleted), %d orphans %s%s",
            scope,
            considered,
            "read from the inventory" if from_inventory else "listed",
            accounted,
            too_young,
            eligible,
            unknown,
            planned,
            "planned (dry run: nothing is deleted)" if run.dry_run else "planned",
            waits,
        )
    return found


def summarize(conn: psycopg.Connection, run: RunRef) -> dict[str, Any]:
    """The run's shards, pages, keys checked, orphans (planned) and findings, from its checkpoints; the orphans waiting
    for confirmation (Param `confirmations`) with a few of their keys, logged."""
    *counts, sample = queries.one_row(conn.execute(queries.load("reconcile/summarize_run"), {"run_id": run.run_id}))
    names = (
        "shards",
        "shards_done",
        "pages",
        "keys_checked",
        "orphans",
        "orphan_bytes",
        "too_young",
        "unknown_keys",
        "missing_objects",
        "waiting",
    )
    summary: dict[str, Any] = {name: int(value) for name, value in zip(names, counts, strict=True)}
    summary["waiting_sample"] = list(sample)
    if summary["waiting"]:
        log.info(
            "%d orphans were found on fewer consecutive real runs than Param confirmations asks: waiting for "
            "confirmation, not planned (e.g. %s)",
            summary["waiting"],
            ", ".join(sample),
        )
    return summary
