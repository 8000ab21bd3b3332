"""
### blobgc_reconcile: the buckets against the database, shard by shard (seed 001 §5)

Seed 001's "cleaning after the cleaning", the second way: listing first, then the database.

1. **plan_shards** checks the collections file and plans the run's parts. With `source=list` (the
   default) it walks the bucket for its shards (one listing call per shard found): each key layout's
   prefix (`blobs/`, `pastes/`, `images/`, `mail/`, from `blobgc.kinds`) cut by leading
   characters, each collection's key prefixes (in its own bucket), plus one shard per unknown
   top-level folder; `listing_ranges` > 1 cuts each shard further into key ranges listed side by side
   (StartAfter boundaries at sub-prefixes its keys really have). With `source=inventory` it finds each
   bucket's newest S3 Inventory report (Variable `blobgc_inventory`) and checks its manifest and age
   (`max_inventory_age_hours`): a missing, stale or malformed report fails the run here, before
   anything is read or deleted; then it reads each report into DuckDB (memory bounded, spilled to
   disk), streams the keys the rows form from PostgreSQL beside it, and writes both once into part
   files by key hash (`inventory_part_keys` report keys a part; `inventory_part_threads` DuckDB threads
   each part's join uses) in the scratch location (Variable
   `blobgc_scratch`; default: the report's bucket, `.blobgc-scratch/`), one shard per part.
   Param `prefixes` limits a run; Param `collections` limits it to those
   collections' objects: nothing else is listed, planned or reported (no seed layout other than
   app_blob's when it is named, no unknown folder, no other collection's prefix), and `source=inventory`
   needs a report only for the buckets those collections are in. Collections whose key columns have no
   index are warned of. Only buckets something points at are read: Variable `blobgc_bucket` (default
   `blobgc`) when a seed layout's table exists or a collection names no bucket of its own, and each
   collection's bucket. Each is checked first: a missing one (or one that refuses the listing) fails the
   run at once, without retries, naming the bucket and the Variable or collection that points at it.
2. **reconcile_shard** (mapped), listing: lists a page of up to 1000 keys, asks the database in one
   query which of them a row accounts for, and owes the others whose `LastModified` is older than the
   run's reference time minus `min_age_hours` (at least 1; the floor applies to deletion, never to the
   listing). A checkpoint per page lets a retry resume where it stopped. From an inventory: one task
   per part, on any worker, fetches its two files, anti-joins them, checks what is left against the
   live database key by key (the report is hours old), a checkpoint per batch, and deletes its files
   once done. Either way, keys of no
   known layout (or no template of their collection) are reported, never deleted; rows whose object
   is missing are recorded, never "fixed".
   Orphans are not deleted here: they go into the run's **plan** (`blobgc.plan_item`), once found
   orphaned on `confirmations` (default 2) consecutive real runs, this one included (each run's
   sightings are kept in `blobgc.reconcile_sighting`; a key a row accounts for again, or whose object
   was written again, starts over). The others are counted as waiting for confirmation.
3. **gate** compares the plan with the median of the last real runs (Variable `blobgc_gate`); past the
   threshold it waits for a person to approve or reject. A dry run never waits.
4. **owe_planned_objects** hands the plan's orphans to the outbox, each with the cut-off it was judged
   by; **delete_owed_objects** deletes them: each layout's guard keeps a key a row claimed since, an
   object written again since the plan is kept, and one already gone is settled as absent.
5. **report** records the totals and the plan's planned, deleted, skipped and failed counts (even
   when the gate refused); findings are in `blobgc.reconcile_finding`. Under `not_planned` it says, per
   collection (and per bucket for seed layouts, unknown keys and inventories), how many objects were
   considered, how many rows account for, how many are too young for the age floor (and when the first
   becomes eligible), how many fit no known layout, and how many orphans were planned; one log line each.

With Param `from_plan` (a dry run's id), steps 1 and 2 check that plan (same DAG, finished, younger than
`plan_max_age_hours`, executed by no other run) instead of listing, and the run deletes exactly it.
Seed 004's buckets are left to their own DAGs. `dry_run` makes the plan and deletes nothing.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param

from blobgc.collectors.reconcile.checks import MIN_AGE_FLOOR_HOURS
from blobgc.collectors.reconcile.deletion import Reconcile
from blobgc.collectors.reconcile.from_inventory import PART_ROWS
from blobgc.dag_kit import destructive_params, plan_params
from blobgc.dag_kit.builder import destructive_dag
from blobgc.dag_kit.collections import FILE, collections_param
from blobgc.dag_kit.variables import blob_bucket_origin, inventory_destinations, scratch_location
from blobgc.reclaim.routes import receipt_path

dag = destructive_dag(
    "blobgc_reconcile",
    # the plan is objects alone: owed to the drain, which deletes them
    deletion=Reconcile(collections=FILE, bucket_origin=blob_bucket_origin,
                       inventory_destinations=inventory_destinations, scratch_location=scratch_location),
    schedule=CronTriggerTimetable("0 5 * * 0", timezone="UTC"),
    params=destructive_params(
        "min_age_hours", 24, "Objects younger than this are never judged orphans (at least 1: an upload in flight "
        "must never be one).", grace_minimum=MIN_AGE_FLOOR_HOURS, collections=collections_param(),
        prefixes=Param(None, type=["null", "array"], items={"type": "string"},
                       description='Limit the run to shards under these prefixes, e.g. ["images/", "pastes/"].'),
        source=Param("list", enum=["list", "inventory"],
                     description="list: walk the buckets with ListObjectsV2. inventory: read each bucket's newest S3 "
                                 "Inventory report (Variable blobgc_inventory) instead; no fallback to listing."),
        max_inventory_age_hours=Param(48, type="number", minimum=1,
                                      description="source=inventory: a report older than this fails the run."),
        inventory_part_keys=Param(PART_ROWS, type="integer", minimum=1,
                                  description="source=inventory: report keys per part of the anti-join; each part is "
                                              "a mapped task of its own, on any worker (smaller: more parts, spread "
                                              "wider)."),
        inventory_part_threads=Param(0, type="integer", minimum=0,
                                     description="source=inventory: DuckDB threads each part's join uses (0: one per "
                                                 "core of its worker). A worker that runs several parts at once "
                                                 "should give each its share: cores / task slots."),
        listing_ranges=Param(1, type="integer", minimum=1, maximum=64,
                             description="source=list: cut each shard into up to this many key ranges, listed by "
                                         "separate mapped tasks side by side."),
        confirmations=Param(2, type="integer", minimum=1,
                            description="Plan an orphan only once this many consecutive real runs (this one "
                                        "included) found it orphaned, its object unchanged. A dry run records no "
                                        "sighting. 1: plan on first sight."),
        **plan_params()),
    tags=["blobgc", "seed-001", "reconcile", "destructive"],
    doc_md=__doc__,
    receipt_path=receipt_path,
)
