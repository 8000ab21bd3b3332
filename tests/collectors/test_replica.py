"""Reads from a read replica (connection blobgc_postgres_replica, `blobgc.core.replica`): the candidate scans read a
deliberately stale replica (tests/support/replica.py), and every decision that deletes re-checks on the primary. A
replica that lags makes blobgc keep more, never delete more."""
from __future__ import annotations

from datetime import timedelta

from blobgc.collectors.mark import mark_collection, mark_in_columns
from blobgc.collectors.reconcile.listing import reconcile_shard
from blobgc.collectors.reconcile.shards import discover_shards
from blobgc.collectors.sweep import plan_collection
from blobgc.core.clients import pg_connect
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.plans import PLAN_MAX_AGE_HOURS, fix_plan
from blobgc.core.references import discover_references
from blobgc.core.replica import PRIMARY, REPLICA, Reads, measure, reading, replica_reads
from blobgc.kinds.blobs import bound_app_blob
from blobgc.kinds.blobs.layouts import blob_keys
from tests.collectors.test_collections import shop_with_references
from tests.collectors.test_sweep import attach, skipped_ids
from tests.collectors.test_sweep import new_run as new_sweep_run
from tests.helpers import NOW, make_blobs, object_keys, set_unused_since
from tests.support.collections import bound_shop, create_shop, new_schema
from tests.support.reconcile import age, contents_rows, execute_plan, floor_cutoff, new_run, owed, put, sha
from tests.support.replica import replica_connector, snapshot
from tests.support.sweep import execute_sweep, pass_gate

CUTOFF = NOW - timedelta(hours=24)


def unused(conn, blob_id: str) -> bool:
    return conn.execute("SELECT unused FROM app.blob WHERE id = %s", (blob_id,)).fetchone()[0]


def test_a_blob_referenced_on_the_primary_but_not_yet_on_the_replica_is_kept(conn, replica, s3, bucket):
    orphan, referenced = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [orphan, referenced], "5 days")
    snapshot(conn, replica)
    attach(conn, "p-new", referenced)  # on the primary only: the replica has not replayed it yet
    run = new_sweep_run(conn, "replica-sweep")
    bound = bound_app_blob(bucket)
    fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
    planned = plan_collection(conn, run, bound, discover_references(conn, "app.blob"), cutoff=CUTOFF, read=replica)
    assert planned.rows_deleted == 2  # the replica shows both unreferenced: both are candidates
    pass_gate(conn, run)
    executed = execute_sweep(conn, run, bound, cutoff=CUTOFF)  # the re-check, on the primary
    assert (executed.rows_deleted, executed.skipped_rereferenced) == (1, 1)
    assert skipped_ids(conn, run) == [referenced]
    delete_owed_objects(conn, s3, run)
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {referenced}
    assert object_keys(s3, bucket) == set(blob_keys(referenced))


def test_the_mark_reading_a_replica_marks_unused_only_what_the_primary_does_not_reference(conn, test_dsn, replica,
                                                                                          replica_dsn, s3, bucket):
    free, on_primary, on_replica_only, both = make_blobs(conn, s3, bucket, 4, thumbnails=False)
    attach(conn, "p-old", on_replica_only)
    attach(conn, "p-both", both)
    snapshot(conn, replica)
    attach(conn, "p-new", on_primary)  # not replayed yet
    conn.execute("DELETE FROM app.blob_attachment WHERE post_id = 'p-old'")  # nor this
    result = mark_in_columns(conn, bound_app_blob(""), discover_references(conn, "app.blob"), range_size=1,
                             workers=2, connect=lambda: pg_connect(test_dsn), read=replica_connector(replica_dsn))
    assert unused(conn, free) is True
    assert unused(conn, on_primary) is False  # referenced on the primary: never marked unused
    assert unused(conn, on_replica_only) is False  # the replica still shows its reference: kept used one mark longer
    assert unused(conn, both) is False
    assert (result.became_unused, result.became_used) == (1, 0)
    assert replica.execute("SELECT count(*) FILTER (WHERE unused) FROM app.blob").fetchone()[0] == 0  # read, not written


def test_reconcile_reading_a_replica_keeps_an_object_whose_row_it_has_not_replayed(conn, replica, s3, bucket):
    old_row, new_row, gone_row, orphan = sha("old-row"), sha("new-row"), sha("gone-row"), sha("orphan")
    contents_rows(conn, old_row, gone_row)
    snapshot(conn, replica)
    contents_rows(conn, new_row)  # the paste written since: not on the replica yet
    conn.execute("DELETE FROM app.content WHERE content_hash = %s", (gone_row,))  # nor this deletion
    put(s3, bucket, *(f"pastes/{h}" for h in (old_row, new_row, gone_row, orphan)))
    age(s3, bucket)
    run = new_run(conn)
    results = [reconcile_shard(conn, s3, run, shard, bucket=bucket, confirmations=1, cutoff=floor_cutoff(),
                               read=replica) for shard in discover_shards(s3, bucket, conn=conn)]
    assert sum(r.orphans for r in results) == 1  # the replica forms no key for the new paste: the primary does
    execute_plan(conn, run)
    assert owed(conn) == {f"pastes/{orphan}"}
    delete_owed_objects(conn, s3, run)
    # the replica still forms the deleted paste's key: its object is kept until the replica has replayed the deletion
    assert object_keys(s3, bucket) == {f"pastes/{old_row}", f"pastes/{new_row}", f"pastes/{gone_row}"}


def test_reads_say_where_they_read_and_a_replica_connection_is_read_only(conn, replica, replica_dsn):
    primary = Reads(PRIMARY, lambda: conn)
    with reading(primary, conn) as read:
        assert read is conn
    reads = replica_reads(replica_connector(replica_dsn))
    assert (reads.connection, reads.replica, reads.standby, reads.lag_seconds) == (REPLICA, True, False, None)
    assert "not a standby" in reads.describe()
    assert measure(conn) == (False, None)
    with reading(reads, conn) as read:
        assert read is not conn
        try:
            read.execute("CREATE TABLE app.written_on_a_replica (x int)")
            raise AssertionError("a replica connection wrote")
        except Exception as error:  # noqa: BLE001 - psycopg's ReadOnlySqlTransaction
            assert "read-only" in str(error)


def test_a_collection_marked_in_its_mark_table_from_a_replica_marks_only_what_the_primary_does_not_reference(
        conn, test_dsn, replica, replica_dsn, s3, bucket):
    """The shop of tests/collectors/test_collections.py (bigint ids, a key to a unique uuid column, NULLs, a reference
    only an extra query follows): uploads 1-4 and 9 referenced, 5-8 not, when the replica took its snapshot."""
    schema = new_schema()
    shop_with_references(conn, s3, bucket, schema)
    create_shop(replica, schema)
    snapshot(conn, replica, schemas=(schema,))
    with conn.transaction():  # since: not replayed
        conn.execute(f"INSERT INTO {schema}.product VALUES (4, 5)")  # 5 referenced on the primary only
        conn.execute(f"DELETE FROM {schema}.product WHERE id = 1")  # 1's reference gone on the primary only
    bound = bound_shop(conn, schema, bucket, name=schema)
    refs = discover_references(conn, f"{schema}.upload", extra_sql=bound.collection.references, id_column="id")
    dry = mark_collection(conn, bound, refs, dry_run=True, read=replica_connector(replica_dsn))
    assert dry.became_unused == 3  # before the first real mark: counted, nothing written
    result = mark_collection(conn, bound, refs, range_size=3, workers=2, connect=lambda: pg_connect(test_dsn),
                             read=replica_connector(replica_dsn))
    assert {r[0] for r in conn.execute(f"SELECT id FROM blobgc.mark_{schema}")} == {6, 7, 8}
    assert (result.became_unused, result.became_used) == (3, 0)


def test_a_standby_says_how_far_behind_it_is_or_that_its_lag_is_unknown():
    connect = lambda: None  # noqa: E731 - never called
    assert "a standby 2.5 s behind the primary" in Reads(REPLICA, connect, True, 2.5).describe()
    assert "a standby whose lag is unknown" in Reads(REPLICA, connect, True, None).describe()
    assert "the primary" in Reads(PRIMARY, connect).describe()
