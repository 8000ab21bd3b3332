"""
### blobgc_paste_expiry: expire pastes in batches, with ref_count, S3 batch delete and Redis (seed 002)

Runs hourly (and can be triggered or backfilled). A paste expires when `status = 'NOT_EXPIRED'`
and `expires_at` is before the run's data-interval end.

1. **check_ref_counts** compares every `app.content.ref_count` with the real count of pastes
   (the truth), reports the drift and repairs it. Contents left with no paste are deleted and
   their objects owed, so drift never leaks storage.
2. **expire_pastes** (mapped: one task per range of `expires_at` that **plan_expiry** cuts,
   `expiry_workers` of them in parallel) works in batches of `batch_size`, one transaction each: claim the pastes
   with `FOR UPDATE SKIP LOCKED` and delete them, decrement each content once by its number of
   claimed pastes, delete the contents that reach 0, and record their keys in the deletion log
   and the outbox, and the short codes in `blobgc.cache_purge`. Two runs at once (a backfill
   beside a scheduled run, a retried zombie) never decrement twice: each decrement comes from the
   rows its own transaction deleted.
3. **delete_owed_objects** deletes the owed `pastes/{content_hash}` objects with DeleteObjects
   (up to 1000 keys a call) and settles the outbox. An object whose content was created again
   since (the re-upload race) is kept. Keys S3 refuses stay owed.
4. **purge_cache_keys** unlinks every expired short code from Redis (cached or not), one variadic
   `UNLINK` per up to 1000 keys, pipelined. A Redis outage leaves the keys owed.
5. **report** records pastes, contents, objects and bytes in `blobgc.reclaim_daily`.

Steps 3 and 4 drain everything this DAG owes, including what earlier runs left when S3 or Redis
was down. `dry_run` reports what would go (pastes, contents, objects, bytes; the keys also in
`blobgc.deletion_log` with `dry_run = true`) and changes nothing. Every task is idempotent:
clear any one of them and re-run it.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import CronTriggerTimetable, Param, dag, get_current_context, task

from blobgc.airflow_adapters import (
    DEFAULT_ARGS,
    S3_POOL,
    blob_bucket,
    deleting_params,
    drain_owed_objects,
    gc_task,
    paste_redis_prefix,
    redis_client,
)


@dag(
    dag_id="blobgc_paste_expiry",
    schedule=CronTriggerTimetable("0 * * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=deleting_params(
        expiry_workers=Param(2, type="integer", minimum=1, maximum=16,
                             description="Parallel expire_pastes tasks, each over its own range of expires_at."),
    ),
    tags=["blobgc", "seed-002", "pastes", "destructive"],
    doc_md=__doc__,
)
def blobgc_paste_expiry():
    @task
    def check_ref_counts() -> dict:
        from blobgc.pastes import check_ref_counts as check

        context = get_current_context()
        with gc_task(context) as (conn, run):
            return vars(check(conn, run, bucket=blob_bucket(), batch_size=context["params"]["batch_size"]))

    @task
    def plan_expiry() -> list[list[str | None]]:
        from blobgc.pastes import split_expiry_window

        context = get_current_context()
        with gc_task(context) as (conn, run):
            parts = 1 if run.dry_run else context["params"]["expiry_workers"]
            ranges = split_expiry_window(conn, run.reference_time, parts)
        return [[edge.isoformat() if edge else None for edge in r] for r in ranges]

    @task(map_index_template="expires_at {{ task.op_kwargs['window'][0] or 'start' }} .. "
                             "{{ task.op_kwargs['window'][1] or 'cutoff' }}")
    def expire_pastes(window: list[str | None]) -> dict:
        from blobgc.pastes import expire_pastes as expire

        context = get_current_context()
        start, end = (datetime.fromisoformat(edge) if edge else None for edge in window)
        with gc_task(context) as (conn, run):
            result = expire(conn, run, expired_before=run.reference_time, bucket=blob_bucket(),
                            batch_size=context["params"]["batch_size"], redis_prefix=paste_redis_prefix(),
                            expires_range=(start, end))
        return result.counts()

    @task(pool=S3_POOL)
    def delete_owed_objects() -> dict:
        return drain_owed_objects(get_current_context())

    @task
    def purge_cache_keys() -> dict:
        from blobgc.cache_purge import purge_owed_cache_keys

        with gc_task(get_current_context()) as (conn, run):
            return vars(purge_owed_cache_keys(conn, redis_client(), run))

    @task
    def report(drift: dict, expired: list[dict], objects: dict, cache: dict) -> dict:
        from blobgc.airflow_adapters import finish_dag_run

        parts = list(expired)
        totals = {key: sum(part[key] for part in parts) for key in parts[0]} if parts else {}
        with gc_task(get_current_context()) as (conn, run):
            return finish_dag_run(conn, run, {"ref_counts": drift, "expired": totals, "objects": objects,
                                          "cache": cache})

    drift = check_ref_counts()
    windows = plan_expiry()
    expired = expire_pastes.expand(window=windows)
    objects = delete_owed_objects()
    cache = purge_cache_keys()
    drift >> windows
    expired >> [objects, cache]
    report(drift, expired, objects, cache)


blobgc_paste_expiry()
