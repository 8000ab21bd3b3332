"""A second application, shaped unlike the demo, collected end to end from a collections file (docs/reference.md §6).

Nothing of blobgc changes for it: bigint ids, keys made of two columns and shared by equal content, a
nullable foreign key holding NULLs, one declared ON DELETE CASCADE, one to a unique non-primary
column, and a polymorphic reference only an extra query can follow.
"""
from __future__ import annotations

from datetime import timedelta

from blobgc.collectors.mark import mark_collection
from blobgc.collectors.reconcile.listing import reconcile_shard
from blobgc.collectors.reconcile.shards import collection_shards
from blobgc.collectors.restore import cancel_owed_deletions, plan_restore, restore_collection_rows, restore_objects
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.plans import fix_plan, owe_planned_objects
from blobgc.core.references import discover_references
from blobgc.core.runs import RunRef, ensure_run
from blobgc.core.gate import let_through
from tests.helpers import NOW, backdate_object, object_keys
from tests.support.collections import (
    add_upload,
    backdate_marks,
    backdate_uploads,
    bound_shop,
    create_shop,
    new_schema,
    shop_yaml,
    user_columns,
    write_collections,
)
from tests.support.sweep import sweep_run

CUTOFF = NOW - timedelta(hours=24)


def new_run(conn, dag_id: str, run_id: str, dry_run: bool = False) -> RunRef:
    return ensure_run(conn, RunRef(dag_id, run_id, dry_run), NOW)


def shop_with_references(conn, s3, bucket: str, schema: str) -> dict[int, dict]:
    """Uploads 1-9: 1-4 and 9 referenced (each a different way), 5-8 not; 9 has 8's content (one shared object)."""
    create_shop(conn, schema)
    uploads = {i: add_upload(conn, s3, schema, bucket, i, f"content-{i}".encode()) for i in range(1, 9)}
    uploads[9] = add_upload(conn, s3, schema, bucket, 9, b"content-8")
    with conn.transaction():
        conn.execute(f"INSERT INTO {schema}.product VALUES (1, 1), (2, NULL), (3, 9)")  # a NULL references nothing
        conn.execute(f"INSERT INTO {schema}.gallery_item (upload_id) VALUES (2)")  # ON DELETE CASCADE
        conn.execute(f"INSERT INTO {schema}.share (upload_token) VALUES (%s), (NULL)", (uploads[3]["token"],))
        conn.execute(f"INSERT INTO {schema}.attachment (target_kind, target_id) "
                     "VALUES ('upload', 4), ('comment', 5), ('upload', NULL)")
    return uploads


def test_a_second_application_is_marked_swept_reconciled_and_restored_exactly(conn, s3, versioned_bucket, tmp_path,
                                                                              monkeypatch):
    bucket, schema = versioned_bucket, new_schema()
    uploads = shop_with_references(conn, s3, bucket, schema)
    columns_before = user_columns(conn, schema)
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(write_collections(tmp_path, shop_yaml(schema, bucket, name=schema))))
    bound = bound_shop(conn, schema, bucket, name=schema)
    refs = discover_references(conn, f"{schema}.upload", extra_sql=bound.collection.references, id_column="id")
    assert sorted(r.table for r in refs.foreign_keys) == ["gallery_item", "product", "share"]

    # mark: the state is blobgc's own; a second mark changes nothing
    assert mark_collection(conn, bound, refs).became_unused == 4
    assert {r[0] for r in conn.execute(f"SELECT id FROM blobgc.mark_{schema}")} == {5, 6, 7, 8}
    assert mark_collection(conn, bound, refs).became_unused == 0

    # sweep: unused for two days; 7 was created just now, so its grace has not passed whatever the mark says
    backdate_marks(conn, schema, "2 days")
    backdate_uploads(conn, schema, [1, 2, 3, 4, 5, 6, 8, 9], "2 days")
    run = new_run(conn, "blobgc_sweep", f"sweep-{schema}")
    planned, swept = sweep_run(conn, run, bound, cutoff=CUTOFF, refs=refs)  # plan, gate, execute: as the DAG runs
    assert (planned.rows_deleted, planned.objects_owed) == (3, 6)
    assert (swept.rows_deleted, swept.objects_owed, swept.skipped_rereferenced) == (3, 6, 0)
    assert {r[0] for r in conn.execute(f"SELECT id FROM {schema}.upload")} == {1, 2, 3, 4, 7, 9}
    assert conn.execute(f"SELECT count(*) FROM {schema}.gallery_item").fetchone()[0] == 1  # CASCADE never fired
    drained = delete_owed_objects(conn, s3, run)
    gone = {uploads[5]["key"], uploads[5]["thumb"], uploads[6]["key"], uploads[6]["thumb"], uploads[8]["thumb"]}
    assert drained.objects_deleted == 5  # 8's content object is 9's too: the collection's guard keeps it
    every_key = {k for u in uploads.values() for k in (u["key"], u["thumb"])}
    assert object_keys(s3, bucket) == every_key - gone
    # a versioned bucket keeps the deleted bytes as noncurrent versions: deleted, not reclaimed (issue 32)
    assert conn.execute("SELECT rows_deleted, objects_deleted, bytes_deleted, bytes_reclaimed "
                        "FROM blobgc.reclaim_daily_by_collection "
                        "WHERE collection = %s AND dag_id = 'blobgc_sweep' AND NOT dry_run", (schema,)
                        ).fetchone() == (3, 5, len(b"content-5") + len(b"content-6") + 30, 0)

    # reconcile: an old orphan under each template is deleted; a young one stays; keys of no template are reported
    orphans = {"uploads/" + "0" * 64 + ".png", "upload-thumbs/999.jpg"}
    young, unknown = "uploads/" + "1" * 64 + ".png", {"uploads/no-extension", "upload-thumbs/not-a-number.jpg"}
    for key in orphans | {young} | unknown:
        s3.put_object(Bucket=bucket, Key=key, Body=b"o")
    for key in orphans | unknown:
        backdate_object(bucket, key, 3 * 86400)
    rrun = new_run(conn, "blobgc_reconcile", f"reconcile-{schema}")
    fix_plan(conn, rrun, None, 24)
    results = [reconcile_shard(conn, s3, rrun, shard, bucket="unused", confirmations=1, cutoff=CUTOFF, collection=bound)
               for shard in collection_shards([bound])]
    assert sum(r.orphans for r in results) == 2 and sum(r.too_young for r in results) == 1
    assert sum(r.unknown_keys for r in results) == 2
    let_through(conn, rrun, approved_by="tests")
    owe_planned_objects(conn, rrun)  # the plan, once the gate let it through
    delete_owed_objects(conn, s3, rrun)
    assert object_keys(s3, bucket) == (every_key - gone) | {young} | unknown

    # restore the sweep: objects back (verified), then the rows, as they were, unmarked
    restore_run = new_run(conn, "blobgc_restore", f"restore-{schema}")
    plan = plan_restore(conn, s3, run.run_id, "blobgc_sweep")
    assert plan.collections == [schema]
    cancel_owed_deletions(conn, restore_run, plan)
    assert restore_objects(conn, s3, restore_run, plan).restored == 5
    rows = restore_collection_rows(conn, s3, restore_run, plan, bound)
    assert (rows.restored, rows.failed) == (3, 0)
    assert {r[0] for r in conn.execute(f"SELECT id FROM {schema}.upload")} == set(range(1, 10))
    assert object_keys(s3, bucket) == every_key | {young} | unknown
    assert user_columns(conn, schema) == columns_before  # blobgc never altered the application's tables


def test_a_dry_run_sweep_of_a_collection_reports_and_changes_nothing(conn, s3, bucket):
    schema = new_schema()
    shop_with_references(conn, s3, bucket, schema)
    bound = bound_shop(conn, schema, bucket, name=schema)
    refs = discover_references(conn, f"{schema}.upload", extra_sql=bound.collection.references, id_column="id")
    dry_mark = mark_collection(conn, bound, refs, dry_run=True)
    assert dry_mark.became_unused == 4
    assert conn.execute("SELECT to_regclass(%s)", (f"blobgc.mark_{schema}",)).fetchone()[0] is None
    mark_collection(conn, bound, refs)
    backdate_marks(conn, schema, "2 days")
    backdate_uploads(conn, schema, list(range(1, 10)), "2 days")
    before = object_keys(s3, bucket)
    run = new_run(conn, "blobgc_sweep", f"dry-{schema}", dry_run=True)
    result, executed = sweep_run(conn, run, bound, cutoff=CUTOFF, refs=refs)
    assert (result.rows_deleted, result.objects_owed) == (4, 8)
    assert (executed.items, executed.rows_deleted) == (0, 0)  # a dry run's delete task does nothing
    assert conn.execute(f"SELECT count(*) FROM {schema}.upload").fetchone()[0] == 9
    assert object_keys(s3, bucket) == before
    assert conn.execute("SELECT rows_deleted, objects_deleted FROM blobgc.reclaim_daily_by_collection "
                        "WHERE collection = %s AND dry_run", (schema,)).fetchone() == (4, 8)


def test_a_row_referenced_after_the_mark_is_kept_by_the_sweep_and_unmarked(conn, s3, bucket):
    schema = new_schema()
    shop_with_references(conn, s3, bucket, schema)
    bound = bound_shop(conn, schema, bucket, name=schema)
    refs = discover_references(conn, f"{schema}.upload", extra_sql=bound.collection.references, id_column="id")
    mark_collection(conn, bound, refs)
    backdate_marks(conn, schema, "2 days")
    backdate_uploads(conn, schema, list(range(1, 10)), "2 days")

    def application_references() -> None:  # after the plan: a polymorphic reference only the extra query sees,
        with conn.transaction():           # and a CASCADE one
            conn.execute(f"INSERT INTO {schema}.attachment (target_kind, target_id) VALUES ('upload', 5)")
            conn.execute(f"INSERT INTO {schema}.gallery_item (upload_id) VALUES (6)")

    planned, result = sweep_run(conn, new_run(conn, "blobgc_sweep", f"race-{schema}"), bound, cutoff=CUTOFF,
                                refs=refs, execute_refs=refs, between=application_references)
    assert planned.rows_deleted == 4
    assert (result.rows_deleted, result.skipped_rereferenced) == (2, 2)
    assert {r[0] for r in conn.execute(f"SELECT id FROM blobgc.mark_{schema}")} == set()
    assert {r[0] for r in conn.execute(f"SELECT id FROM {schema}.upload")} >= {5, 6}
