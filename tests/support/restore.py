"""A swept run on a versioned bucket, for the restore tests."""
from __future__ import annotations

from datetime import timedelta

from blobgc.collectors.sweep import execute_plan_part, plan_collection, range_part
from blobgc.kinds.blobs import bound_app_blob
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.gate import GateSettings, judge, record_judgement
from blobgc.core.plans import PASSED, execution_report, fix_plan
from blobgc.core.quarantine import NO_QUARANTINE, QuarantinePolicy
from blobgc.core.references import discover_references
from blobgc.core.runs import RunRef, ensure_run, finish_run
from tests.helpers import NOW, make_blobs, set_unused_since


def swept_run(conn, s3, bucket: str, run_id: str, n: int = 3, keep: int = 1, *, drain: bool = True,
              quarantine: QuarantinePolicy = NO_QUARANTINE) -> tuple[RunRef, list[str], list[str]]:
    """`n` blobs, the first `keep` referenced, the rest unused for 2 days; a sweep of them and (unless not `drain`)
    its drain (with `quarantine`'s days)."""
    ids = make_blobs(conn, s3, bucket, n, prefix=f"{run_id}-")
    kept, garbage = ids[:keep], ids[keep:]
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES (%s)", (f"post-{run_id}",))
        for blob_id in kept:
            conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES (%s, %s)", (f"post-{run_id}", blob_id))
    set_unused_since(conn, garbage, "2 days")
    run = ensure_run(conn, RunRef("blobgc_sweep", run_id, False), NOW)
    # as the DAG does it: plan (only this run's blobs: their ids share its prefix), the gate, execute, drain, report
    fix_plan(conn, run, None, 24)
    bound, refs, cutoff = bound_app_blob(bucket), discover_references(conn, "app.blob"), NOW - timedelta(hours=24)
    ids_range = (f"{run_id}-", f"{run_id}-~")
    plan_collection(conn, run, bound, refs, cutoff=cutoff, key_range=ids_range)
    record_judgement(conn, run, judge(conn, run, GateSettings()), PASSED)
    execute_plan_part(conn, run, bound, refs, cutoff=cutoff, part=range_part(ids_range, bound.name))
    if drain:
        delete_owed_objects(conn, s3, run, quarantine=quarantine)
    finish_run(conn, run, {"plan": execution_report(conn, run)})
    return run, kept, garbage
