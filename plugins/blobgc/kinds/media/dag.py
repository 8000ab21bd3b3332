"""
### blobgc_media_staging: abandoned uploads in seed 004's staging areas

Clients upload straight to `staging/{userId}/…` (bucket `{prefix}images`) and
`profiles-staging/{userId}/{slot}/…` (bucket `{prefix}profiles`) with a presigned POST that lives
5 minutes; `finalize` moves what it accepts and deletes what it refuses. What is left there was
never finalized: a client that gave up, or a finalize that died between its copy and its delete.

1. **plan_shards** fixes the run's plan and finds the shards: one per leading character of the user
   ids under each staging prefix (one listing call per shard found).
2. **plan_stale_staging** (mapped: one task per shard) lists the shard and puts into the run's **plan**
   (`blobgc.plan_item`) every upload last modified before the run's data-interval end (never past the
   present) minus `max_age_minutes` (which must exceed the presign lifetime: at least 7), with that
   cut-off. Only keys of the staging layouts (`staging/{userId}/{uuid}.{ext}`,
   `profiles-staging/{userId}/{slot}/{uuid}.{ext}`) are planned; any other key under a staging prefix is
   reported as `unexpected` and kept. A retry lists again and replaces what it planned.
3. **gate** compares the plan with the median of the last real runs (Variable `blobgc_gate`); past the
   threshold it waits for a person to approve or reject. A dry run never waits.
4. **owe_planned_objects** hands the plan's uploads to the outbox; **delete_owed_objects** deletes them
   with DeleteObjects, 1000 keys a call, asking each one's LastModified first: an upload written again
   since the plan is kept, one finalized meanwhile is gone already and counts as absent.
5. **report** records the totals and the plan's planned, deleted, skipped and failed counts (even when
   the gate refused).

With Param `from_plan` (a dry run's id), steps 1 and 2 check that plan (same DAG, finished, younger than
`plan_max_age_hours`, executed by no other run) instead of listing, and the run deletes exactly it.
`dry_run` makes the plan and deletes nothing.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param

from blobgc.dag_kit import deleting_params, plan_params
from blobgc.dag_kit.builder import destructive_dag
from blobgc.dag_kit.variables import media_settings
from blobgc.kinds.media.deletion import MediaStaging
from blobgc.reclaim.routes import receipt_path

dag = destructive_dag(
    "blobgc_media_staging",
    deletion=MediaStaging(settings=media_settings),  # the plan is objects alone: owed to the drain
    schedule=CronTriggerTimetable("20 * * * *", timezone="UTC"),
    params=deleting_params(
        max_age_minutes=Param(60, type="integer", minimum=7,
                              description="Staging objects older than this are abandoned uploads. Must exceed "
                                          "the presigned POST's 5 minutes."),
        **plan_params()),
    tags=["blobgc", "seed-004", "media", "destructive"],
    doc_md=__doc__,
    receipt_path=receipt_path,
)
