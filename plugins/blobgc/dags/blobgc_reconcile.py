"""
### blobgc_reconcile: the buckets against the database, shard by shard (seed 001 §5)

Seed 001's "cleaning after the cleaning", the second way: listing first, then the database.

1. **plan_shards** checks the collections file and walks the bucket for its shards (one listing call
   per shard found): each key layout's prefix (`blobs/`, `pastes/`, `images/`, `mail/`, from
   `blobgc.core.keys`) cut by leading characters, each collection's key prefixes (in its own bucket),
   plus one shard per unknown top-level folder. Param `prefixes` limits a run; Param `collections`
   limits it to those collections' shards. Collections whose key columns have no index are warned of.
2. **reconcile_shard** (mapped) lists a page of up to 1000 keys, asks the database in one query which
   of them a row accounts for, and owes the others whose `LastModified` is older than the run's
   reference time minus `min_age_hours` (at least 1; the floor applies to deletion, never to the
   listing). Keys of no known layout (or no template of their collection) are reported, never
   deleted; rows whose object is missing are recorded, never "fixed". A checkpoint per page lets a
   retry resume where it stopped.
3. **delete_owed_objects** deletes the orphans; each layout's guard keeps a key a row claimed since.
4. **report** records the totals; findings are in `blobgc.reconcile_finding`.

Seed 004's buckets are left to their own DAGs. `dry_run` reports and deletes nothing.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param, dag

from blobgc.collectors import reconcile
from blobgc.collectors.reconcile import MIN_AGE_FLOOR_HOURS, Shard, ShardResult
from blobgc.core.outbox import DrainResult
from blobgc.dag_kit import S3_POOL, Step, dag_defaults, destructive_params, drain_owed_objects, gc_step, report_run
from blobgc.dag_kit.collections import checked_collections, collections_param, one_collection, s3_for_collections
from blobgc.dag_kit.variables import blob_bucket


@dag(
    dag_id="blobgc_reconcile",
    schedule=CronTriggerTimetable("0 5 * * 0", timezone="UTC"),
    **dag_defaults(),
    params=destructive_params(
        "min_age_hours", 24, "Objects younger than this are never judged orphans (at least 1: an upload in flight "
        "must never be one).", grace_minimum=MIN_AGE_FLOOR_HOURS, collections=collections_param(),
        prefixes=Param(None, type=["null", "array"], items={"type": "string"},
                       description='Limit the run to shards under these prefixes, e.g. ["images/", "pastes/"].')),
    tags=["blobgc", "seed-001", "reconcile", "destructive"],
    doc_md=__doc__,
)
def blobgc_reconcile():
    @gc_step()
    def plan_shards(step: Step) -> list[dict]:
        collections = checked_collections(step.conn, step.params, index_warnings=True)
        shards = reconcile.discover_shards(step.s3, blob_bucket(), step.params["prefixes"], conn=step.conn,
                                           collections=collections, seeds=not step.params["collections"])
        return [s.to_xcom() for s in shards]

    @gc_step(pool=S3_POOL, map_index_template="{% set s = task.op_kwargs['shard'] %}"
                                               "{{ s['collection'] ~ ': ' if s['collection'] else '' }}"
                                               "{{ s['prefix'] or '(top level)' }}")
    def reconcile_shard(step: Step, shard: dict) -> ShardResult:
        part = Shard.from_xcom(shard)
        return reconcile.reconcile_shard(
            step.conn, s3_for_collections(step.s3), step.run, part, bucket=blob_bucket(),
            cutoff=step.cutoff(hours=step.params["min_age_hours"]),
            collection=one_collection(step.conn, part.collection) if part.collection else None)

    shards = reconcile_shard.expand(shard=plan_shards())
    drained = drain_owed_objects()()
    shards >> drained
    report_run(summaries={"reconcile": reconcile.summarize}, shards=ShardResult, objects=DrainResult)(
        shards=shards, objects=drained)


dag = blobgc_reconcile()
