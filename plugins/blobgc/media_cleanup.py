"""Seed 004's cleanups: stale staging uploads, masters without thumbnails, thumbnails without a master.

The store has no database, so the bucket listing is the truth; blobgc's own bookkeeping (runs,
the deletion log, the outbox) still lives in PostgreSQL, so every deletion is logged, owed,
retried and counted like the other DAGs'. Work is split in shards: one per leading character of
the user ids found in a bucket (under `staging/` and `profiles-staging/` for staging), each a
mapped task listing its keys in order.

Deletion follows the layouts, never a prefix alone: the staging cleaner deletes only keys of the
staging layouts (`staging/{userId}/{uuid}.{ext}`, `profiles-staging/{userId}/{slot}/{uuid}.{ext}`)
and reports anything else under a staging prefix; orphan thumbnails are at least an hour old
(`MIN_ORPHAN_AGE`), whatever the Param says, since a master's upload and its thumbnails are not atomic.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import psycopg

from blobgc.media import (
    MASTER,
    PRESIGN_SECONDS,
    PROFILE_MASTER,
    PROFILE_THUMB,
    THUMB,
    MediaSettings,
    listing,
    master_prefix_of_thumb,
    queue_thumbnail_jobs,
    recently_queued,
    staging_layout,
    thumb_key,
)
from blobgc.outbox import MEDIA_THUMBNAIL_SOURCE, replace_run_log
from blobgc.reconcile import first_key, leading_shards
from blobgc.runs import RunRef, set_counts
from blobgc.settings import ConfigurationError

log = logging.getLogger(__name__)

STAGING_SOURCE = "media.staging"
MIN_STAGING_AGE = timedelta(seconds=PRESIGN_SECONDS) + timedelta(minutes=1)  # a live upload's longest wait
MIN_ORPHAN_AGE = timedelta(hours=1)  # the floor of blobgc_media_thumbnails' min_age_hours
UNEXPECTED_KEYS_LOGGED = 20  # keys under a staging prefix that match no staging layout: this many are named


@dataclass(frozen=True)
class MediaShard:
    bucket: str
    prefix: str  # e.g. "staging/0", "profiles-staging/a", "0" (users whose id starts with 0)
    kind: str  # "image" or "icon" (for thumbnails); "staging"

    def as_xcom(self) -> dict[str, str]:
        return {"bucket": self.bucket, "prefix": self.prefix, "kind": self.kind}


def staging_shards(s3, settings: MediaSettings) -> list[MediaShard]:
    return [MediaShard(bucket, shard, "staging")
            for bucket, prefix in ((settings.images_bucket, "staging/"), (settings.profiles_bucket, "profiles-staging/"))
            for shard in leading_shards(s3, bucket, prefix)]


def thumbnail_shards(s3, settings: MediaSettings) -> list[MediaShard]:
    return [MediaShard(bucket, shard, kind)
            for bucket, kind in ((settings.images_bucket, "image"), (settings.profiles_bucket, "icon"))
            for shard in leading_shards(s3, bucket, "")]


# ----------------------------------------------------------------------------------------------- staging
def check_max_age(max_age: timedelta) -> None:
    """blobgc_media_staging's max_age_minutes: a live upload must never look abandoned."""
    if max_age < MIN_STAGING_AGE:
        raise ConfigurationError(f"max_age_minutes must exceed the presigned upload's lifetime ({PRESIGN_SECONDS // 60} "
                         f"minutes) with a margin: at least {MIN_STAGING_AGE.total_seconds() / 60:.0f} minutes")


def delete_stale_staging(conn: psycopg.Connection, s3, run: RunRef, shard: MediaShard, *, cutoff: datetime,
                         batch_size: int = 1000, floor: timedelta = MIN_STAGING_AGE) -> dict:
    """Owe the deletion of every staging upload of the shard last modified before `cutoff`.

    Only keys of the staging layout go (`staging/{userId}/{uuid}.{ext}` in the images bucket,
    `profiles-staging/{userId}/{slot}/{uuid}.{ext}` in the profiles bucket): anything else under a
    staging prefix is no upload of ours (the masters of a user created before `staging` became a
    reserved id, say) and is counted as `unexpected` and logged, never deleted. Nothing younger than
    `floor` (a presigned upload's lifetime plus a minute) goes, whatever the cutoff. The keys are
    logged and owed in one transaction, replacing what an earlier attempt of this run owed for the shard.
    """
    layout = staging_layout(shard.prefix)
    cutoff = min(cutoff, datetime.now(timezone.utc) - floor)
    keys, sizes, fresh, unexpected = [], [], 0, []
    for o in listing(s3, shard.bucket, shard.prefix):
        if not layout.fullmatch(o["Key"]):
            unexpected.append(o["Key"])
        elif o["LastModified"] < cutoff:
            keys.append(o["Key"])
            sizes.append(o["Size"])
        else:
            fresh += 1
    with conn.transaction():
        replace_run_log(conn, run, source=f"{STAGING_SOURCE} {shard.bucket}/{shard.prefix}", bucket=shard.bucket,
                        keys=keys, sizes=sizes, batch_size=batch_size)
        if run.dry_run:  # the shard's whole report, set (not added): a retried shard counts once
            set_counts(conn, run, rows=0, objects=len(keys), bytes_=sum(sizes), part=f"{shard.bucket}/{shard.prefix}")
    if unexpected:
        log.warning("%s/%s: %d keys match no staging layout and are kept (not uploads; never deleted here)%s: %s",
                    shard.bucket, shard.prefix, len(unexpected),
                    f", the first {UNEXPECTED_KEYS_LOGGED}" if len(unexpected) > UNEXPECTED_KEYS_LOGGED else "",
                    ", ".join(unexpected[:UNEXPECTED_KEYS_LOGGED]))
    log.info("%s/%s: %d stale staging objects (%d bytes) %s, %d fresh kept, %d unexpected keys kept", shard.bucket,
             shard.prefix, len(keys), sum(sizes), "would go" if run.dry_run else "owed", fresh, len(unexpected))
    return {"shard": f"{shard.bucket}/{shard.prefix}", "stale": len(keys), "stale_bytes": sum(sizes), "fresh": fresh,
            "unexpected": len(unexpected)}


# -------------------------------------------------------------------------------------------- thumbnails
def check_min_age(min_age: timedelta) -> None:
    """blobgc_media_thumbnails' min_age_hours: at least `MIN_ORPHAN_AGE`, so a master whose upload is
    under way never has its fresh thumbnails taken for orphans, nor its job queued twice."""
    if min_age < MIN_ORPHAN_AGE:
        raise ConfigurationError(f"min_age_hours must be at least {MIN_ORPHAN_AGE.total_seconds() / 3600:.0f} hour, not "
                         f"{min_age.total_seconds() / 3600:g}: younger thumbnails may belong to a master still being "
                         "uploaded, and younger masters may have their first job still queued")


@dataclass
class UserObjects:
    """One user's masters and thumbnails in a shard: master key -> last modified; thumbnail key -> (size, age)."""

    masters: dict[str, datetime]
    thumbs: dict[str, tuple[int, datetime]]


def users_in(s3, shard: MediaShard) -> Iterator[UserObjects]:
    """The shard's keys, one user at a time (a user's keys are contiguous in a listing)."""
    current, objects = None, UserObjects({}, {})
    master, thumb = (MASTER, THUMB) if shard.kind == "image" else (PROFILE_MASTER, PROFILE_THUMB)
    for o in listing(s3, shard.bucket, shard.prefix):
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


def check_thumbnails(conn: psycopg.Connection, s3, redis, run: RunRef, shard: MediaShard, settings: MediaSettings,
                     *, cutoff: datetime, batch_size: int = 1000) -> dict:
    """Queue masters older than `cutoff` that lack a thumbnail size, and owe the deletion of
    thumbnails older than `cutoff` whose master is gone. A dry run only reports both.

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
    with conn.transaction():
        replace_run_log(conn, run, source=f"{MEDIA_THUMBNAIL_SOURCE} {shard.bucket}/{shard.prefix}",
                        bucket=shard.bucket, keys=[k for k, _ in orphans], sizes=[s for _, s in orphans],
                        batch_size=batch_size)
        if run.dry_run:  # the shard's whole report, set (not added): a retried shard counts once
            set_counts(conn, run, rows=0, objects=len(orphans), bytes_=sum(s for _, s in orphans),
                       part=f"{shard.bucket}/{shard.prefix}")
    kind = "image" if shard.kind == "image" else "icon"
    requeue_after = min_age.total_seconds()
    if run.dry_run:
        queued = len(missing) - len(recently_queued(redis, shard.bucket, missing, requeue_after))
    else:
        queued = queue_thumbnail_jobs(redis, kind, shard.bucket, missing, requeue_after_seconds=requeue_after)
    log.info("%s/%s: %d masters, %d thumbnails; %d masters lacking thumbnails, %d of them %s (the others were queued "
             "less than %s ago), %d orphan thumbnails %s", shard.bucket, shard.prefix or "(all)", masters, thumbs,
             len(missing), queued, "would be queued" if run.dry_run else "queued", min_age, len(orphans),
             "would go" if run.dry_run else "owed")
    return {"shard": f"{shard.bucket}/{shard.prefix}", "masters": masters, "thumbnails": thumbs,
            "missing": len(missing), "missing_queued": queued, "missing_already_queued": len(missing) - queued,
            "orphans": len(orphans), "orphan_bytes": sum(s for _, s in orphans)}


@contextmanager
def keep_thumbnails_with_a_master(conn: psycopg.Connection, s3, bucket: str, keys: list[str]) -> Iterator[set[str]]:
    """The outbox's guard for orphan thumbnails: keep any whose master exists again (a profile slot
    uploaded anew since the check), by one listing per master prefix, just before the deletion."""
    by_master: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        prefix = master_prefix_of_thumb(key)
        if prefix is not None:
            by_master[prefix].append(key)
    needed = {k for prefix, ks in by_master.items() if first_key(s3, bucket, prefix, "") is not None for k in ks}
    if needed:
        log.info("keeping %d owed thumbnails: their master exists again", len(needed))
    yield needed
