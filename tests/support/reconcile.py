"""Seed 001 §5's test kit: objects put and aged, content rows, whole-bucket reconcile runs, findings."""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

from blobgc.collectors.reconcile.listing import reconcile_shard
from blobgc.collectors.reconcile.shards import discover_shards
from blobgc.core.plans import fix_plan, owe_planned_objects
from blobgc.core.runs import RunRef, ensure_run
from blobgc.core.gate import let_through
from tests.helpers import backdate_objects


DAG = "blobgc_reconcile"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def put(s3, bucket: str, *keys: str, body: bytes = b"12345") -> None:
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=body)


def contents_rows(conn, *hashes: str) -> None:
    with conn.transaction():
        for digest in hashes:
            conn.execute("INSERT INTO app.content (content_hash, ref_count, size_bytes) VALUES (%s, 1, 5)", (digest,))


def new_run(conn, name: str = "r1", dry_run: bool = False) -> RunRef:
    """A run of the reconcile DAG that makes its own plan (as its first task fixes)."""
    run = RunRef(DAG, name, dry_run)
    ensure_run(conn, run)
    fix_plan(conn, run, None, 24)
    return run


def execute_plan(conn, run: RunRef) -> None:
    """What the DAG does once the gate let the run's plan through: owe its orphans to the outbox."""
    if not run.dry_run:
        let_through(conn, run, approved_by="tests")
        owe_planned_objects(conn, run)


def planned(conn, run: RunRef) -> set[str]:
    """The keys in the run's plan."""
    return {r[0] for r in conn.execute("SELECT unnest(keys) FROM blobgc.plan_item WHERE dag_id = %s AND run_id = %s",
                                       (run.dag_id, run.run_id))}


def age(s3, bucket: str, hours: float = 48, prefix: str = "") -> None:
    """Make the objects written so far old the honest way: the local S3 server backdates their LastModified."""
    backdate_objects(s3, bucket, hours * 3600, prefix)


def floor_cutoff(hours: float = 24) -> datetime:
    """The cut-off of a run now with `min_age_hours` = hours (never in the future)."""
    return datetime.now(timezone.utc) - timedelta(hours=hours)


def reconcile_all(conn, s3, bucket, run, *, cutoff=None, page_size=1000, confirmations=1):
    """Every shard of the bucket planned, then the plan owed (as a run the gate let through); `confirmations` 1 (an
    orphan planned on first sight) unless given."""
    cutoff = cutoff or floor_cutoff()
    results = [reconcile_shard(conn, s3, run, shard, bucket=bucket, cutoff=cutoff, page_size=page_size,
                               confirmations=confirmations)
               for shard in discover_shards(s3, bucket, conn=conn)]
    execute_plan(conn, run)
    return results


def owed(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT key FROM blobgc.deleted_object WHERE owed")}
