"""
### blobgc_paste_expiry: expire pastes in batches, with ref_count, S3 batch delete and Redis (seed 002)

Hourly (and by hand, or backfilled). A paste expires when `status = 'NOT_EXPIRED'` and `expires_at`
is before the run's reference time (its data-interval end, never past now).

A run **plans first, then deletes exactly its plan** (`blobgc.core.plans`):

1. **check_ref_counts** fixes the run's plan (with Param `from_plan`, a dry run's id: checks that plan
   instead, same DAG, finished, younger than `plan_max_age_hours`, executed by no other run), and
   repairs `app.content.ref_count` drift (the count of pastes is the truth). Contents left with no
   paste are planned (part *orphan contents*), never deleted outside a plan; a run executing a dry
   run's plan plans nothing, and a later run picks them up.
2. **expiry_ranges** cuts the due pastes into `expiry_workers` ranges of `content_hash` (none with
   `from_plan`), so that all the pastes of a content fall in one part; **plan_expiry** (mapped, one
   task per range) lists the due pastes, a batch of `batch_size` per plan item, with the
   `pastes/{content_hash}` objects (and sizes) of the contents that batch takes to ref_count 0.
   Nothing is locked or deleted. On a dry run, this is the report (also in `blobgc.deleted_object`,
   `dry_run = true`).
3. **gate** compares the plan with the median of the last real runs (Variable `blobgc_gate`); past the
   threshold it waits for a person to approve or reject. A dry run never waits.
4. **plan_parts** lists the plan's parts once the gate let it through; **expire_pastes** (mapped, one
   task per part) executes them, an item per transaction: claim again (`FOR UPDATE SKIP LOCKED`) only
   the planned pastes still NOT_EXPIRED and due before the plan's cutoff, delete them, decrement each
   content once by its claimed pastes, delete the contents that reach 0 *and were planned*, owe their
   objects (outbox) and the short codes (`blobgc.cache_purge`). A paste extended since the plan, and
   an object whose content gained a paste, are skipped and recorded; a content that reaches 0 without
   being planned keeps its row and object for a later run. Orphan contents go only if still no paste
   points at them. Two runs at once never decrement twice.
5. **delete_owed_objects** deletes the owed `pastes/{content_hash}` objects (an object whose content
   was created again meanwhile is kept); **purge_cache_keys** unlinks the short codes from Redis.
   Both drain what earlier runs left owed too, and run even when this run's plan is empty or was refused
   at the gate (then they only drain what earlier runs owe).
6. **report** records pastes, contents, objects and bytes in `blobgc.reclaim_daily`, and the plan's
   planned, deleted, skipped and failed counts. It runs even when the gate refused.

`dry_run` makes the plan and changes nothing. Every task is idempotent: clear and re-run it. A run
cleared whole after its gate (a backfill reprocessing a failed run) keeps the plan that was judged and
executes what is left of it, planning nothing again. The receipt page
`/blobgc/runs/blobgc_paste_expiry/<run id>` shows the plan and what became of it.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param

from blobgc.dag_kit import deleting_params, plan_params
from blobgc.dag_kit.builder import destructive_dag
from blobgc.dag_kit.variables import blob_bucket, paste_redis_prefix
from blobgc.kinds.pastes.deletion import PasteExpiry
from blobgc.reclaim.routes import receipt_path

dag = destructive_dag(
    "blobgc_paste_expiry",
    deletion=PasteExpiry(bucket=blob_bucket, redis_prefix=paste_redis_prefix),
    schedule=CronTriggerTimetable("0 * * * *", timezone="UTC"),
    params=deleting_params(
        expiry_workers=Param(2, type="integer", minimum=1, maximum=16,
                             description="Parallel plan_expiry tasks, each over its own range of content_hash (and so "
                                         "parts of the plan, each executed by its own expire_pastes task)."),
        **plan_params()),
    tags=["blobgc", "seed-002", "pastes", "destructive"],
    doc_md=__doc__,
    receipt_path=receipt_path,
)
