"""A run's manifest (receipts' manifest.csv / manifest.json), encoded from a real drain's records."""
from __future__ import annotations

import contextlib
import csv
import io

from blobgc.core.outbox import delete_owed_objects, record_deletions
from blobgc.core.runs import RunRef, ensure_run
from blobgc.reclaim.manifest import manifest_chunks
from tests.helpers import NOW

DAG = "blobgc_manifest_test"


def test_manifest_gives_each_deleted_key_the_size_its_drain_counted(conn, s3, bucket):
    """Issue 30: a collection without a `size` column logs its keys without sizes; the drain learns them from the
    store and counts them as reclaimed, and manifest.csv now shows them too (it showed an empty size_bytes). A
    logged size stays as it is; a key that was never written has none."""
    run = ensure_run(conn, RunRef(DAG, "manual__sizes"), NOW)
    s3.put_object(Bucket=bucket, Key="m/a", Body=b"a" * 11)
    s3.put_object(Bucket=bucket, Key="m/b", Body=b"b" * 13)
    with conn.transaction():
        record_deletions(conn, run, source="test.objects", bucket=bucket, keys=["m/a", "m/b", "m/never-written"],
                         sizes=[None, 13, None])
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.bytes_reclaimed) == (2, 24)

    text = "".join(manifest_chunks(lambda: contextlib.nullcontext(conn), DAG, run.run_id, "csv"))
    rows = {r["key"]: (r["status"], r["size_bytes"]) for r in csv.DictReader(io.StringIO(text))}
    assert rows == {"m/a": ("deleted", "11"), "m/b": ("deleted", "13"), "m/never-written": ("absent", "")}
    assert sum(int(size) for status, size in rows.values() if status == "deleted") == drained.bytes_reclaimed
