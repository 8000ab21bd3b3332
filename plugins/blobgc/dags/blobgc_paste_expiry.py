"""
### blobgc_paste_expiry: expire pastes in batches, with ref_count, S3 batch delete and Redis (seed 002)

Hourly (and by hand, or backfilled). A paste expires when `status = 'NOT_EXPIRED'` and `expires_at`
is before the run's reference time (its data-interval end, never past now).

1. **check_ref_counts** repairs `app.content.ref_count` drift (the count of pastes is the truth);
   contents left with no paste go, so drift never leaks storage.
2. **expire_pastes** (mapped over the ranges of `expires_at` that **plan_expiry** cuts, `expiry_workers`)
   works in batches of `batch_size`, one transaction each: claim and delete the pastes (`FOR UPDATE
   SKIP LOCKED`), decrement each content once by its claimed pastes, delete contents that reach 0,
   owe their objects (outbox) and the short codes (`blobgc.cache_purge`). Two runs at once never
   decrement twice.
3. **delete_owed_objects** deletes the owed `pastes/{content_hash}` objects (an object whose content
   was created again meanwhile is kept); **purge_cache_keys** unlinks the short codes from Redis.
   Both drain what earlier runs left owed too.
4. **report** records pastes, contents, objects and bytes in `blobgc.reclaim_daily`.

`dry_run` reports what would go and changes nothing. Every task is idempotent: clear and re-run it.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import CronTriggerTimetable, Param, dag

from blobgc.collectors.paste_expiry import (
    DriftReport, ExpiryResult, check_ref_counts, expire_pastes, split_expiry_window,
)
from blobgc.core.cache_purge import PurgeResult
from blobgc.core.outbox import DrainResult
from blobgc.dag_kit import (
    Step, dag_defaults, deleting_params, drain_owed_objects, gc_step, purge_owed_cache_keys, report_run,
)
from blobgc.dag_kit.variables import blob_bucket, paste_redis_prefix


@dag(
    dag_id="blobgc_paste_expiry",
    schedule=CronTriggerTimetable("0 * * * *", timezone="UTC"),
    **dag_defaults(),
    params=deleting_params(
        expiry_workers=Param(2, type="integer", minimum=1, maximum=16,
                             description="Parallel expire_pastes tasks, each over its own range of expires_at.")),
    tags=["blobgc", "seed-002", "pastes", "destructive"],
    doc_md=__doc__,
)
def blobgc_paste_expiry():
    @gc_step(task_id="check_ref_counts")
    def repair_ref_counts(step: Step) -> DriftReport:
        return check_ref_counts(step.conn, step.run, bucket=blob_bucket(), batch_size=step.params["batch_size"])

    @gc_step()
    def plan_expiry(step: Step) -> list[list[str | None]]:
        parts = 1 if step.run.dry_run else step.params["expiry_workers"]
        ranges = split_expiry_window(step.conn, step.run.reference_time, parts)
        return [[edge.isoformat() if edge else None for edge in r] for r in ranges]

    @gc_step(task_id="expire_pastes", map_index_template="expires_at {{ task.op_kwargs['window'][0] or 'start' }} "
                                                          ".. {{ task.op_kwargs['window'][1] or 'cutoff' }}")
    def expire_window(step: Step, window: list[str | None]) -> ExpiryResult:
        start, end = (datetime.fromisoformat(edge) if edge else None for edge in window)
        return expire_pastes(step.conn, step.run, expired_before=step.run.reference_time, bucket=blob_bucket(),
                             batch_size=step.params["batch_size"], redis_prefix=paste_redis_prefix(),
                             expires_range=(start, end))

    drift = repair_ref_counts()
    windows = plan_expiry()
    expired = expire_window.expand(window=windows)
    objects = drain_owed_objects()()
    cache = purge_owed_cache_keys()()
    drift >> windows
    expired >> [objects, cache]
    report_run(ref_counts=DriftReport, expired=ExpiryResult, objects=DrainResult, cache=PurgeResult)(
        ref_counts=drift, expired=expired, objects=objects, cache=cache)


dag = blobgc_paste_expiry()
