"""A swept run on a versioned bucket, for the restore tests."""
from __future__ import annotations

from datetime import timedelta

from blobgc.collectors.sweep import sweep_unused_blobs
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.references import discover_references
from blobgc.core.runs import RunRef, ensure_run
from tests.helpers import NOW, make_blobs, set_unused_since


def swept_run(conn, s3, bucket: str, run_id: str, n: int = 3, keep: int = 1) -> tuple[RunRef, list[str], list[str]]:
    """`n` blobs, the first `keep` referenced, the rest unused for 2 days; a sweep and its drain."""
    ids = make_blobs(conn, s3, bucket, n, prefix=f"{run_id}-")
    kept, garbage = ids[:keep], ids[keep:]
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES (%s)", (f"post-{run_id}",))
        for blob_id in kept:
            conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES (%s, %s)", (f"post-{run_id}", blob_id))
    set_unused_since(conn, garbage, "2 days")
    run = RunRef("blobgc_sweep", run_id, False)
    ensure_run(conn, run, NOW)
    sweep_unused_blobs(conn, run, discover_references(conn), cutoff=NOW - timedelta(hours=24), bucket=bucket)
    delete_owed_objects(conn, s3, run)
    return run, kept, garbage
