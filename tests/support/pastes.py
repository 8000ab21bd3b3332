"""Seed 002's test kit: expiry times, runs, and the ref_count of a content."""
from __future__ import annotations

from datetime import timedelta

from tests.support.gated import expire_due_pastes
from blobgc.core.cache_purge import purge_owed_cache_keys
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.runs import RunRef, ensure_run
from tests.helpers import NOW


FUTURE = NOW + timedelta(days=30)


PAST = NOW - timedelta(hours=1)


def new_run(conn, name: str = "r1", *, dry_run: bool = False) -> RunRef:
    """A run of blobgc_paste_expiry whose reference time (its cutoff) is NOW."""
    return ensure_run(conn, RunRef("blobgc_paste_expiry", name, dry_run), NOW)


def expire_all(conn, s3, redis, run: RunRef, bucket: str, prefix: str, **kwargs):
    """The DAG's steps in order (without the gate): plan and execute the expiry, delete what is owed in S3, purge
    what is owed in Redis."""
    expired = expire_due_pastes(conn, run, approved_by="tests",
                                expired_before=NOW, bucket=bucket, redis_prefix=prefix, **kwargs)
    drained = delete_owed_objects(conn, s3, run)
    purged = purge_owed_cache_keys(conn, redis, run)
    return expired, drained, purged


def ref_count(conn, digest: str) -> int | None:
    row = conn.execute("SELECT ref_count FROM app.content WHERE content_hash = %s", (digest,)).fetchone()
    return row[0] if row else None
