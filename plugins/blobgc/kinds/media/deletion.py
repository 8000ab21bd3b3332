"""Seed 004's media store as two planned deletions of objects alone (`blobgc.engine.Deletion`), which its DAGs are
built from. Both list the two buckets shard by shard (each leading character of the keys its own mapped task) and
plan objects no row accounts for; the engine owes them after the gate and the drain deletes them, checking each
again.

- `MediaStaging` (`blobgc_media_staging`): abandoned uploads under the staging prefixes;
- `ThumbnailCheck` (`blobgc_media_thumbnails`): first works the thumbnail queue, then plans thumbnails whose master
  is gone and queues again masters missing theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from blobgc.core.objects import ObjectStore
from blobgc.core.refusals import MEDIA_BUCKET_VARIABLE, check_buckets
from blobgc.core.results import TaskResult
from blobgc.core.settings import MediaSettings
from blobgc.engine import Deletion, Reported, Tasks, Work
from blobgc.kinds.media import cleanup
from blobgc.kinds.media.cleanup import MediaShard, Render, StagingResult, ThumbnailResult

SHARD_LABEL = "{{ task.op_kwargs['shard']['bucket'] }}/{{ task.op_kwargs['shard']['prefix'] }}"


def check_media_buckets(s3: ObjectStore, settings: MediaSettings) -> None:
    """Seed 004's two buckets exist and may be listed (else the task fails at once, naming the bucket and Variable
    blobgc_media_bucket_prefix)."""
    origin = f"{MEDIA_BUCKET_VARIABLE} {settings.bucket_prefix!r}"
    check_buckets(s3, {settings.images_bucket: [origin], settings.profiles_bucket: [origin]})


@dataclass(frozen=True)
class MediaListing(Deletion):
    """What both media deletions share: the buckets checked first, the shards of a listing. `settings` reads the
    buckets when a step runs (Variable blobgc_media_bucket_prefix, in a DAG)."""

    settings: Callable[[], MediaSettings]

    lists_objects = True

    def check(self, work: Work) -> None:
        check_media_buckets(work.s3, self.settings())  # a missing bucket fails here, named, without retries

    def media_shards(self, s3: ObjectStore, settings: MediaSettings) -> list[MediaShard]:
        raise NotImplementedError

    def shards(self, work: Work, prepared: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [s.to_xcom() for s in self.media_shards(work.s3, self.settings())]


@dataclass(frozen=True)
class MediaStaging(MediaListing):
    tasks = Tasks(shards="plan_shards", plan="plan_stale_staging")
    reported = Reported(planned={"staging": StagingResult})
    labels = {"plan_stale_staging": SHARD_LABEL}

    def media_shards(self, s3: ObjectStore, settings: MediaSettings) -> list[MediaShard]:
        return cleanup.staging_shards(s3, settings)

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        return cleanup.plan_stale_staging(
            work.conn,
            work.s3,
            work.run,
            MediaShard.from_xcom(shard),
            cutoff=work.cutoff(minutes=work.params["max_age_minutes"]),
            batch_size=work.params["batch_size"],
        )


@dataclass(frozen=True)
class ThumbnailCheck(MediaListing):
    """`render` makes a master's thumbnails (the application's own renderer)."""

    render: Render

    tasks = Tasks(prepare="drain_thumbnail_queue", shards="plan_shards", plan="check_thumbnails")
    reported = Reported(planned={}, prepared=("thumbnails", ThumbnailResult))
    extra_counters = ("dead_letters_dropped",)
    labels = {"check_thumbnails": SHARD_LABEL}

    def prepare(self, work: Work, *, plans: bool) -> TaskResult:
        """Work the thumbnail queue (a dry run reports it as it is); every run does, even one executing a dry run's
        plan."""
        return cleanup.work_thumbnail_queue(
            work.redis, work.s3, work.run, self.settings(), self.render, max_jobs=work.params["max_jobs"]
        )

    def media_shards(self, s3: ObjectStore, settings: MediaSettings) -> list[MediaShard]:
        return cleanup.thumbnail_shards(s3, settings)

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        return cleanup.check_thumbnails(
            work.conn,
            work.s3,
            work.redis,
            work.run,
            MediaShard.from_xcom(shard),
            self.settings(),
            cutoff=work.cutoff(hours=work.params["min_age_hours"]),
            batch_size=work.params["batch_size"],
        )
