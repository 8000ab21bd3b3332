"""A reconcile run's shards, from its Params: one per bucket's newest inventory report, or listing ranges."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import psycopg

from blobgc.collectors.reconcile.from_inventory import report_shards, scopes
from blobgc.collectors.reconcile.shards import Shard, plan_listing
from blobgc.core.collections import BoundCollection
from blobgc.core.objects import ObjectStore


def run_shards(
    conn: psycopg.Connection,
    s3: ObjectStore,
    list_s3,
    bucket: str,
    collections: list[BoundCollection],
    params: Mapping[str, Any],
    *,
    reference_time: datetime | None,
    destinations: dict[str, str],
    bucket_variable: str,
) -> list[Shard]:
    """The shards of a run with `params` (source, prefixes, listing_ranges, max_inventory_age_hours, collections):
    `source=inventory`, one per bucket in scope (`report_shards`); else the listing's (`plan_listing`, which
    checks every bucket first). `s3` reaches the run's bucket and the reports, `list_s3` the collections'."""
    seeds = not params["collections"]
    if params["source"] == "inventory":
        in_scope = scopes(conn, bucket, collections, seeds=seeds, prefixes=params["prefixes"])
        return report_shards(s3, destinations, in_scope, reference_time, params["max_inventory_age_hours"])
    return plan_listing(
        conn,
        s3,
        bucket,
        collections,
        seeds=seeds,
        prefixes=params["prefixes"],
        ranges=params["listing_ranges"],
        bucket_variable=bucket_variable,
        list_s3=list_s3,
    )
