"""Two sweeps of a collection whose rows share one content-addressed object, for the restore tests (issue 29, finding
`restore-shared-object`): the first deletes row A and keeps the shared object (row B forms it), the second deletes B
and the object. Each sweep is made as blobgc_sweep's tasks make it: mark, plan, the gate, execute, drain.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from blobgc.collectors.mark import mark_collection
from blobgc.core.collections import BoundCollection
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.runs import RunRef, ensure_run
from tests.helpers import NOW, object_keys
from tests.support.collections import (
    add_upload,
    backdate_marks,
    backdate_uploads,
    bound_shop,
    create_shop,
    new_schema,
    shop_yaml,
    write_collections,
)
from tests.support.sweep import references_of, sweep_run

CUTOFF = NOW - timedelta(hours=24)


@dataclass
class SharedObjectRuns:
    schema: str
    bound: BoundCollection
    a: dict  # upload 1: swept by the first run
    b: dict  # upload 2: same bytes, so the same content key; swept by the second run
    first: RunRef
    second: RunRef

    @property
    def shared(self) -> str:
        return self.a["key"]


def swept(conn, s3, bound: BoundCollection, schema: str, run_id: str) -> RunRef:
    """Mark the collection, age its marks and rows by two days, and sweep it: plan, gate, execute, drain."""
    refs = references_of(conn, bound)
    mark_collection(conn, bound, refs)
    backdate_marks(conn, schema, "2 days")
    backdate_uploads(conn, schema, [1, 2], "2 days")
    run = ensure_run(conn, RunRef("blobgc_sweep", run_id), NOW)
    sweep_run(conn, run, bound, cutoff=CUTOFF, refs=refs)
    delete_owed_objects(conn, s3, run)
    return run


def shared_object_swept_twice(conn, s3, bucket: str, tmp_path: Path, monkeypatch) -> SharedObjectRuns:
    """Uploads A and B of equal bytes share the key K; a first sweep deletes A and keeps K (B, used, forms it); B is
    then no longer used, and a second sweep deletes B and K. The collections file is BLOBGC_COLLECTIONS."""
    schema = new_schema()
    create_shop(conn, schema)
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(write_collections(tmp_path, shop_yaml(schema, bucket, name=schema))))
    bound = bound_shop(conn, schema, bucket, name=schema)
    a = add_upload(conn, s3, schema, bucket, 1, b"the same bytes")
    b = add_upload(conn, s3, schema, bucket, 2, b"the same bytes")
    assert a["key"] == b["key"]
    with conn.transaction():
        conn.execute(f"INSERT INTO {schema}.product VALUES (1, 2)")  # B is used, A is not
    first = swept(conn, s3, bound, schema, f"first-{schema}")
    kept = {r[0] for r in conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s AND kept_at IS NOT NULL",
                                       (first.run_id,))}
    assert kept == {a["key"]}  # the drain's guard kept K: B forms it
    assert object_keys(s3, bucket) == {a["key"], b["thumb"]}
    with conn.transaction():
        conn.execute(f"DELETE FROM {schema}.product")
    second = swept(conn, s3, bound, schema, f"second-{schema}")
    assert {r[0] for r in conn.execute(f"SELECT id FROM {schema}.upload")} == set()
    assert object_keys(s3, bucket) == set()  # K went with B, its last row
    return SharedObjectRuns(schema, bound, a, b, first, second)
