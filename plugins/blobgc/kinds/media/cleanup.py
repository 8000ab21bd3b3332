"""Seed 004's cleanups: stale staging uploads, masters without thumbnails, thumbnails without a master.

The store has no database, so the bucket listing is the truth; blobgc's own bookkeeping (runs,
the deletion log, the outbox) still lives in PostgreSQL, so every deletion is planned, judged by
the gate, logged, owed, retried and counted like the other DAGs'. Work is split in shards: one per leading character of
the user ids found in a bucket (under `staging/` and `profiles-staging/` for staging), each a
mapped task listing its keys in order.

Deletion follows the layouts, never a prefix alone: the staging cleaner deletes only keys of the
staging layouts (`staging/{userId}/{uuid}.{ext}`, `profiles-staging/{userId}/{slot}/{uuid}.{ext}`)
and reports anything else under a staging prefix; orphan thumbnails are at least an hour old
(`MIN_ORPHAN_AGE`), whatever the Param says, since a master's upload and its thumbnails are not atomic.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
from botocore.exceptions import ClientError

from blobgc.core.objects import ObjectStore, leading_shards, listing
from blobgc.core.plans import plan_listed_objects
from blobgc.core.quarantine import in_quarantine
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef
from blobgc.core.settings import MEDIA_PRESIGN_SECONDS, ConfigurationError, MediaSettings
from blobgc.core.uploads import Rejected
from blobgc.kinds.media.layouts import (
    MASTER,
    MEDIA_STAGING,
    MEDIA_THUMBNAILS,
    PROFILE_MASTER,
    PROFILE_THUMB,
    THUMB,
    master_prefix_of_thumb,
    staging_layout,
    thumb_key,
)
from blobgc.kinds.media.thumbnail_jobs import (
    DEAD_LETTER_CAP,
    DEAD_LETTERS,
    PROCESSING,
    TRIM_DEAD_LETTERS_SCRIPT,
    check_dead_letter_cap,
    finish,
    forget_lost_jobs,
    queue_thumbnail_jobs,
    recently_queued,
    taken_jobs,
    text,
    thumbnail_queue_counts,
)

log = logging.getLogger(__name__)

MIN_STAGING_AGE = timedelta(seconds=MEDIA_PRESIGN_SECONDS) + timedelta(minutes=1)  # a live upload's longest wait
MIN_ORPHAN_AGE = timedelta(hours=1)  # the floor of blobgc_media_thumbnails' min_age_hours
UNEXPECTED_KEYS_LOGGED = 20  # keys under a staging prefix that match no staging layout: this many are named


@dataclass(frozen=True)
class MediaShard(TaskResult):
    """One mapped task's share of a bucket: the keys under `prefix`."""

    bucket: str
    prefix: str  # e.g. "staging/0", "profiles-staging/a", "0" (users whose id starts with 0)
    kind: str  # "image" or "icon" (for thumbnails); "staging"

    @property
    def name(self) -> str:
        return f"{self.bucket}/{self.prefix}"


@dataclass
class StagingResult(TaskResult):
    """One staging shard: stale uploads planned for deletion, fresh ones kept, keys of no upload."""

    shard: str = ""
    stale: int = 0
    stale_bytes: int = 0
    fresh: int = 0
    unexpected: int = 0


@dataclass
class ThumbnailCheckResult(TaskResult):
    """One shard's masters and thumbnails: masters lacking a size queued, orphan thumbnails planned for deletion."""

    shard: str = ""
    masters: int = 0
    thumbnails: int = 0
    missing: int = 0
    missing_queued: int = 0
    missing_already_queued: int = 0
    orphans: int = 0
    orphan_bytes: int = 0


def staging_shards(s3: ObjectStore, settings: MediaSettings) -> list[MediaShard]:
    return [
        MediaShard(bucket, shard, "staging")
        for bucket, prefix in ((settings.images_bucket, "staging/"), (settings.profiles_bucket, "profiles-staging/"))
        for shard in leading_shards(s3, bucket, prefix)
    ]


def thumbnail_shards(s3: ObjectStore, settings: MediaSettings) -> list[MediaShard]:
    return [
        MediaShard(bucket, shard, kind)
        for bucket, kind in ((settings.images_bucket, "image"), (settings.profiles_bucket, "icon"))
        for shard in leading_shards(s3, bucket, "")
    ]


# ----------------------------------------------------------------------------------------------- staging
def plan_stale_staging(
    conn: psycopg.Connection,
    s3: ObjectStore,
    run: RunRef,
    shard: MediaShard,
    *,
    cutoff: datetime,
    batch_size: int = 1000,
    floor: timedelta = MIN_STAGING_AGE,
) -> StagingResult:
    """Plan the deletion of every staging upload of the shard last modified before `cutoff`.

    Only keys of the staging layout go (`staging/{userId}/{uuid}.{ext}` in the images bucket,
    `profiles-staging/{userId}/{slot}/{uuid}.{ext}` in the profiles bucket): anything else under a
    staging prefix is no upload of ours (the masters of a user created before `staging` became a
    reserved id, say) and is counted as `unexpected` and logged, never deleted. Nothing younger than
    `floor` (a presigned upload's lifetime plus a minute) goes, whatever the cutoff. The keys go into the
    run's plan with that cut-off, replacing what an earlier attempt planned for the shard; once the gate
    lets the plan through they are owed (`blobgc.core.plans.owe_planned_objects`), and the drain keeps an
    upload written again since (its LastModified is past the cut-off). One finalized since is gone already.
    """
    layout = staging_layout(shard.prefix)
    cutoff = min(cutoff, datetime.now(UTC) - floor)
    keys, sizes, fresh, unexpected = [], [], 0, []
    for o in listing(s3, shard.bucket, shard.prefix):
        if in_quarantine(o["Key"]):
            continue
        if not layout.fullmatch(o["Key"]):
            unexpected.append(o["Key"])
        elif o["LastModified"] < cutoff:
            keys.append(o["Key"])
            sizes.append(o["Size"])
        else:
            fresh += 1
    plan_listed_objects(
        conn,
        run,
        part=shard.name,
        source=MEDIA_STAGING.source,
        bucket=shard.bucket,
        keys=keys,
        sizes=sizes,
        modified_before=cutoff,
        batch_size=batch_size,
    )
    if unexpected:
        log.warning(
            "%s/%s: %d keys match no staging layout and are kept (not uploads; never deleted here)%s: %s",
            shard.bucket,
            shard.prefix,
            len(unexpected),
            f", the first {UNEXPECTED_KEYS_LOGGED}" if len(unexpected) > UNEXPECTED_KEYS_LOGGED else "",
            ", ".join(unexpected[:UNEXPECTED_KEYS_LOGGED]),
        )
    log.info(
        "%s/%s: %d stale staging objects (%d bytes) planned, %d fresh kept, %d unexpected keys kept",
        shard.bucket,
        shard.prefix,
        len(keys),
        sum(sizes),
        fresh,
        len(unexpected),
    )
    return StagingResult(shard.name, len(keys), sum(sizes), fresh, len(unexpected))


# -------------------------------------------------------------------------------------------- thumbnails
def check_min_age(min_age: timedelta) -> None:
    """blobgc_media_thumbnails' min_age_hours: at least `MIN_ORPHAN_AGE`, so a master whose upload is
    under way never has its fresh thumbnails taken for orphans, nor its job queued twice."""
    if min_age < MIN_ORPHAN_AGE:
        raise ConfigurationError(
            f"min_age_hours must be at least {MIN_ORPHAN_AGE.total_seconds() / 3600:.0f} hour, not "
            f"{min_age.total_seconds() / 3600:g}: younger thumbnails may belong to a master still being "
            "uploaded, and younger masters may have their first job still queued"
        )


@dataclass
class UserObjects:
    """One user's masters and thumbnails in a shard: master key -> last modified; thumbnail key -> (size, age)."""

    masters: dict[str, datetime]
    thumbs: dict[str, tuple[int, datetime]]


def users_in(s3: ObjectStore, shard: MediaShard) -> Iterator[UserObjects]:
    """The shard's keys, one user at a time (a user's keys are contiguous in a listing)."""
    current, objects = None, UserObjects({}, {})
    master, thumb = (MASTER, THUMB) if shard.kind == "image" else (PROFILE_MASTER, PROFILE_THUMB)
    for o in listing(s3, shard.bucket, shard.prefix):
        if in_quarantine(o["Key"]):
            continue  # a deleted object waiting in quarantine: neither a master nor a thumbnail
        user = o["Key"].split("/", 1)[0]
        if user != current:
            if current is not None:
                yield objects
            current, objects = user, UserObjects({}, {})
        if master.fullmatch(o["Key"]):
            objects.masters[o["Key"]] = o["LastModified"]
        elif thumb.fullmatch(o["Key"]):
            objects.thumbs[o["Key"]] = (o["Size"], o["LastModified"])
    if current is not None:
        yield objects


def check_thumbnails(
    conn: psycopg.Connection,
    s3: ObjectStore,
    redis,
    run: RunRef,
    shard: MediaShard,
    settings: MediaSettings,
    *,
    cutoff: datetime,
    batch_size: int = 1000,
) -> ThumbnailCheckResult:
    """Queue masters older than `cutoff` that lack a thumbnail size, and plan the deletion of
    thumbnails older than `cutoff` whose master is gone. A dry run queues nothing and makes its plan.

    The orphans are planned with the cut-off (`blobgc.core.plans.plan_listed_objects`): once the gate lets the
    plan through they are owed, and the drain keeps a thumbnail whose master came back or that was written again.

    `cutoff` must lie at least `MIN_ORPHAN_AGE` before the run's reference time (ValueError
    otherwise). A master is queued again only once its earlier job was queued longer ago than that
    min age (`media-thumb-queue:queued`), so the queue does not grow by one job per master and run.
    """
    if run.reference_time is None:
        raise ValueError(f"run {run.run_id} of {run.dag_id} has no reference time: call blobgc.runs.ensure_run first")
    min_age = run.reference_time - cutoff
    check_min_age(min_age)
    sizes = settings.thumb_sizes(shard.kind)
    missing: list[str] = []
    orphans: list[tuple[str, int]] = []
    masters = thumbs = 0
    for user in users_in(s3, shard):
        masters += len(user.masters)
        thumbs += len(user.thumbs)
        master_prefixes = {m.rsplit(".", 1)[0] + "." for m in user.masters}  # a master whatever its extension
        for key, modified in user.masters.items():
            if modified < cutoff and any(thumb_key(key, w, h) not in user.thumbs for w, h in sizes):
                missing.append(key)
        for key, (size, modified) in user.thumbs.items():
            if modified < cutoff and master_prefix_of_thumb(key) not in master_prefixes:
                orphans.append((key, size))
    plan_listed_objects(
        conn,
        run,
        part=shard.name,
        source=MEDIA_THUMBNAILS.source,
        bucket=shard.bucket,
        keys=[k for k, _ in orphans],
        sizes=[s for _, s in orphans],
        modified_before=cutoff,
        batch_size=batch_size,
    )
    kind = "image" if shard.kind == "image" else "icon"
    requeue_after = min_age.total_seconds()
    if run.dry_run:
        queued = len(missing) - len(recently_queued(redis, shard.bucket, missing, requeue_after))
    else:
        queued = queue_thumbnail_jobs(redis, kind, shard.bucket, missing, requeue_after_seconds=requeue_after)
    log.info(
        "%s/%s: %d masters, %d thumbnails; %d masters lacking thumbnails, %d of them %s (the others were queued "
        "less than %s ago), %d orphan thumbnails planned",
        shard.bucket,
        shard.prefix or "(all)",
        masters,
        thumbs,
        len(missing),
        queued,
        "would be queued" if run.dry_run else "queued",
        min_age,
        len(orphans),
    )
    return ThumbnailCheckResult(
        shard.name,
        masters,
        thumbs,
        len(missing),
        queued,
        len(missing) - queued,
        len(orphans),
        sum(s for _, s in orphans),
    )


# ------------------------------------------------------------------------------------- thumbnail worker
# The application's thumbnail renderer: a master's bytes -> WebP bytes per (W, H) box; refuses (Rejected)
# bytes that can never make one (not an image, a decompression bomb).
Render = Callable[[bytes, tuple[tuple[int, int], ...]], dict[tuple[int, int], bytes]]


@dataclass
class ThumbnailResult(TaskResult):
    jobs: int = 0
    thumbnails: int = 0
    recovered: int = 0  # jobs a dead worker had taken, done again
    skipped: int = 0  # master gone: nothing to do
    dead_lettered: int = 0
    dead_letters_dropped: int = 0  # the oldest dead letters trimmed to keep the list within its cap
    queued_entries_forgotten: int = 0  # queued-hash entries of jobs lost long ago
    queued: int = 0  # a dry run's view of the queue: jobs waiting, taken by a worker, dead-lettered
    processing: int = 0
    dead_letters: int = 0
    errors: list[str] = local()


class PoisonJob(ValueError):
    """A job that can never succeed; it goes to the dead-letter list with the reason."""


def parse_job(raw: str | bytes, settings: MediaSettings) -> tuple[str, str, str]:
    try:
        job = json.loads(text(raw))
        kind, bucket, key = job["type"], job["bucket"], job["originalKey"]
    except (ValueError, KeyError, TypeError) as error:
        raise PoisonJob(f"malformed job: {error}") from error
    expected = {"image": (settings.images_bucket, MASTER), "icon": (settings.profiles_bucket, PROFILE_MASTER)}
    if (
        kind not in expected
        or bucket != expected[kind][0]
        or not isinstance(key, str)
        or not expected[kind][1].fullmatch(key)
    ):
        raise PoisonJob(f"not a {kind!r} master of this store: {bucket}/{key}")
    return kind, bucket, key


def make_thumbnails(s3: ObjectStore, settings: MediaSettings, render: Render, raw: str) -> int:
    """Do one job: the master's thumbnails at every configured size. Returns how many were written
    (0 when the master is gone). Raises PoisonJob for jobs that can never succeed; anything else
    (S3 unreachable) propagates and the job stays taken, for the retry."""
    kind, bucket, key = parse_job(raw, settings)
    try:
        data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return 0
        raise
    try:
        rendered = render(data, settings.thumb_sizes(kind))
    except Rejected as error:
        raise PoisonJob(f"{key}: {error}") from error
    for (w, h), body in rendered.items():
        s3.put_object(Bucket=bucket, Key=thumb_key(key, w, h), Body=body, ContentType="image/webp")
    return len(rendered)


def work_thumbnail_queue(
    redis, s3: ObjectStore, run: RunRef, settings: MediaSettings, render: Render, *, max_jobs: int = 10_000
) -> ThumbnailResult:
    """blobgc_media_thumbnails' worker step: drain the queue into thumbnails, or on a dry run take no job and
    report the queue as it is (jobs queued, taken by a worker, dead-lettered)."""
    if run.dry_run:
        counts = thumbnail_queue_counts(redis)
        return ThumbnailResult(
            queued=counts["queued"], processing=counts["processing"], dead_letters=counts["dead_letters"]
        )
    return drain_thumbnail_queue(redis, s3, settings, render, max_jobs=max_jobs)


def drain_thumbnail_queue(
    redis,
    s3: ObjectStore,
    settings: MediaSettings,
    render: Render,
    *,
    max_jobs: int = 10_000,
    batch: int = 50,
    workers: int = 2,
    dead_letter_cap: int = DEAD_LETTER_CAP,
) -> ThumbnailResult:
    """Make the thumbnails the queue asks for, `batch` jobs at a time on `workers` threads.

    A job is moved atomically (LMOVE) to `media-thumb-queue:processing` when taken, and removed
    from there only once its thumbnails are written. Jobs a dead worker left there are done first
    (thumbnails are overwritten, so doing a job twice is harmless). Jobs that can never succeed go
    to `media-thumb-queue:dead` with the reason, which keeps the newest `dead_letter_cap` (the
    oldest beyond it are dropped and counted); an S3 failure raises with the batch's unfinished
    jobs still in the processing list, for the task's retry. Settling a job forgets its entry in
    `media-thumb-queue:queued`, so the master may be queued again.
    """
    check_dead_letter_cap(dead_letter_cap)
    result = ThumbnailResult()
    result.dead_letters_dropped = int(redis.eval(TRIM_DEAD_LETTERS_SCRIPT, 1, DEAD_LETTERS, dead_letter_cap))
    leftover = [j for j in redis.lrange(PROCESSING, 0, -1)]
    if leftover:
        log.info("%d jobs were taken by a worker that died: doing them again", len(leftover))
    pending: Iterator[list[str]] = iter([list(reversed(leftover))] if leftover else [])

    def do(raw: str) -> tuple[str, int | None, str | None]:
        try:
            return raw, make_thumbnails(s3, settings, render, raw), None
        except PoisonJob as error:
            return raw, None, str(error)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        while result.jobs < max_jobs:
            jobs = next(pending, None)
            recovered = jobs is not None
            if jobs is None:
                jobs = taken_jobs(redis, min(batch, max_jobs - result.jobs))
                if not jobs:
                    break
            for raw, written, poison in pool.map(do, jobs):
                result.jobs += 1
                result.recovered += recovered
                if poison is not None:
                    log.warning("dead-lettered thumbnail job %s: %s", text(raw), poison)
                    result.dead_lettered += 1
                    result.dead_letters_dropped += finish(redis, raw, poison, dead_letter_cap=dead_letter_cap)
                    continue
                result.thumbnails += written or 0
                result.skipped += written == 0
                finish(redis, raw)
    result.queued_entries_forgotten = forget_lost_jobs(redis)
    log.info(
        "thumbnail jobs: %d done (%d recovered from a dead worker), %d thumbnails, %d masters gone, "
        "%d dead-lettered (%d old dead letters dropped to keep %d), %d entries of long-lost jobs forgotten",
        result.jobs,
        result.recovered,
        result.thumbnails,
        result.skipped,
        result.dead_lettered,
        result.dead_letters_dropped,
        dead_letter_cap,
        result.queued_entries_forgotten,
    )
    return result
