"""Seed 003's test kit: runs, blobs and mail keys, and an old generation to collect."""
from __future__ import annotations

from blobgc.kinds.generations.collector import open_generation
from blobgc.core.runs import RunRef, ensure_run
from demo_app.mail import delete_reference, store_blob
from tests.helpers import object_keys


DAG = "blobgc_generations"


def run_ref(conn, run_id: str, *, dry_run: bool = False) -> RunRef:
    run = RunRef(DAG, run_id, dry_run)
    ensure_run(conn, run)
    return run


def blobs(conn) -> dict[str, int]:
    return dict(conn.execute("SELECT blob_id, generation FROM gen.blob").fetchall())


def mail_keys(s3, bucket: str) -> set[str]:
    return {k for k in object_keys(s3, bucket) if k.startswith("mail/")}


def old_generation_with(conn, s3, bucket: str, *, referenced: int, garbage: int) -> tuple[set[str], set[str]]:
    """Generation 1 with `referenced` blobs still referenced and `garbage` ones whose reference was
    deleted; then generations 2 and 3 are opened, so that generation 1 can be collected."""
    open_generation(conn, run_ref(conn, "setup-1"))
    kept = {store_blob(conn, s3, bucket=bucket, owner_id=f"live-{i}", content=f"live {i}".encode()).blob_id
            for i in range(referenced)}
    gone = set()
    for i in range(garbage):
        stored = store_blob(conn, s3, bucket=bucket, owner_id=f"dead-{i}", content=f"dead {i}".encode())
        delete_reference(conn, owner_id=f"dead-{i}", blob_id=stored.blob_id)
        gone.add(stored.blob_id)
    open_generation(conn, run_ref(conn, "setup-2"))
    open_generation(conn, run_ref(conn, "setup-3"))
    return kept, gone
