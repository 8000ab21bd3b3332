"""blobgc.collectors.sweep: seed 000's sweep after the grace, with the re-check that no reference appeared.

Every run here goes the way blobgc_sweep's tasks go (tests/support/sweep.py): plan (`plan_collection`), the gate,
execute (`execute_plan_part`), then the drain (`blobgc.core.outbox`). A reference that appears mid-run appears
after the plan: before the delete task starts, or while it runs.
"""
from __future__ import annotations

import random
import threading
from datetime import timedelta

import psycopg
import pytest
from botocore.exceptions import EndpointConnectionError

from blobgc.collectors.sweep import PlanExecution, SweepResult
from blobgc.core.clients import pg_connect, s3_client
from blobgc.kinds.blobs import bound_app_blob
from blobgc.core.key_space import split_key_space
from blobgc.kinds.blobs.layouts import blob_keys
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.references import ReferenceSet, discover_references
from blobgc.core.runs import RunRef, ensure_run, finish_run
from blobgc.core.key_space import IdColumn
from tests.helpers import NOW, deny_deletes, make_blobs, object_keys, set_unused_since, wait_until
from tests.support.sweep import execute_sweep, pass_gate, plan_sweep, sweep_run


CUTOFF = NOW - timedelta(hours=24)


def new_run(conn, run_id: str, dry_run: bool = False) -> RunRef:
    run = RunRef("blobgc_sweep", run_id, dry_run)
    ensure_run(conn, run, NOW)
    return run


def sweep(conn, bucket, run, *, refs=None, execute_refs=None, batch_size=1000, cutoff=CUTOFF,
          between=None) -> tuple[SweepResult, PlanExecution]:
    """A run over app_blob as blobgc_sweep makes it: plan, gate, `between`, execute; (the plan's figures, the
    execution's). The test drains."""
    return sweep_run(conn, run, bound_app_blob(bucket), cutoff=cutoff, refs=refs, execute_refs=execute_refs,
                     batch_size=batch_size, between=between)


def existing(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT id FROM app.blob")}


def owed(conn) -> list[tuple[str, int, str | None]]:
    """(key, attempts, last error) of every owed object deletion."""
    return conn.execute(
        "SELECT k.key, o.attempts, o.last_errors ->> k.key FROM blobgc.outbox o "
        "JOIN blobgc.deletion_log l ON l.id = o.log_id "
        "CROSS JOIN LATERAL unnest(coalesce(o.keys, l.keys)) AS k(key) ORDER BY 1"
    ).fetchall()


def attach(conn, post_id: str, blob_id: str) -> None:
    conn.execute("INSERT INTO app.post (id) VALUES (%s) ON CONFLICT DO NOTHING", (post_id,))
    conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES (%s, %s)", (post_id, blob_id))


def unused(conn, blob_id: str) -> bool:
    return conn.execute("SELECT unused FROM app.blob WHERE id = %s", (blob_id,)).fetchone()[0]


def skipped_ids(conn, run: RunRef) -> list[str]:
    """The planned rows the run's execution skipped (referenced again, or no longer unused, since the plan)."""
    return sorted(i for (ids,) in conn.execute("SELECT skipped_ids FROM blobgc.plan_outcome WHERE run_id = %s",
                                               (run.run_id,)) for i in ids)


def logged_keys(conn, run: RunRef) -> set[str]:
    """The keys the run logged and owed (deleted or still owed)."""
    return {k for (k,) in conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s", (run.run_id,))}


class RefusingClient:
    """A real S3 client whose DeleteObjects answers 200 with `Errors` for chosen keys (AccessDenied)."""

    def __init__(self, inner, refuse: set[str]):
        self.inner, self.refuse = inner, refuse

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def delete_objects(self, Bucket, Delete):
        allowed = [o for o in Delete["Objects"] if o["Key"] not in self.refuse]
        if allowed:
            self.inner.delete_objects(Bucket=Bucket, Delete={"Objects": allowed, "Quiet": True})
        return {"Errors": [{"Key": o["Key"], "Code": "AccessDenied", "Message": "Access Denied"}
                           for o in Delete["Objects"] if o["Key"] in self.refuse]}


def test_only_blobs_unused_longer_than_the_grace_are_deleted(conn, s3, bucket):
    old, recent, used = make_blobs(conn, s3, bucket, 3)
    set_unused_since(conn, [old], "3 days")
    set_unused_since(conn, [recent], "2 hours")
    run = new_run(conn, "grace")
    planned, executed = sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    assert planned.rows_deleted == executed.rows_deleted == 1
    assert existing(conn) == {recent, used}
    assert drained.objects_deleted == 2 and drained.owed_after == 0
    assert object_keys(s3, bucket) == {k for b in (recent, used) for k in blob_keys(b)}


@pytest.mark.parametrize("created", ["before-the-plan", "between-plan-and-execution"])
def test_blob_referenced_by_a_table_created_in_the_test_is_never_swept(conn, s3, bucket, created):
    """A table created with a reference to a blob the mark found unused: existing when the run plans, it keeps the
    blob out of the plan; created after the plan, the delete task (which finds the references at its start) keeps
    the blob and marks it used again."""
    covered, loose = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [covered, loose], "3 days")  # a mark that ran before the table existed

    def create_table() -> None:
        with conn.transaction():
            conn.execute("CREATE SCHEMA IF NOT EXISTS sweep_test")
            conn.execute("DROP TABLE IF EXISTS sweep_test.banner")
            conn.execute("CREATE TABLE sweep_test.banner (id int PRIMARY KEY, image text REFERENCES app.blob)")
            conn.execute("INSERT INTO sweep_test.banner VALUES (1, %s)", (covered,))

    try:
        if created == "before-the-plan":
            create_table()
        run = new_run(conn, f"new-table-{created}")
        planned, executed = sweep(conn, bucket, run,
                                  between=create_table if created == "between-plan-and-execution" else None)
        delete_owed_objects(conn, s3, run)
        assert existing(conn) == {covered}
        assert executed.rows_deleted == 1
        if created == "before-the-plan":
            assert (planned.rows_deleted, planned.kept_referenced) == (1, 1)  # never planned
        else:
            assert planned.rows_deleted == 2 and executed.skipped_rereferenced == 1
            assert skipped_ids(conn, run) == [covered]
            assert unused(conn, covered) is False  # found referenced at delete time: used again
        assert logged_keys(conn, run) == set(blob_keys(loose))
        assert set(blob_keys(covered)) <= object_keys(s3, bucket)
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA sweep_test CASCADE")


def test_reference_inserted_by_a_second_connection_during_the_sweep_protects_its_blob(
        conn, other_conn, s3, bucket):
    """A writer's transaction attaches a blob and is still open while the run plans and executes: the plan cannot see
    the reference, the execution's claim skips the row the writer holds (SKIP LOCKED), and once the writer has
    committed the next run leaves the blob out of its plan."""
    ids = make_blobs(conn, s3, bucket, 5)
    target = ids[2]
    set_unused_since(conn, ids, "3 days")
    # The application attaches `target` in a transaction that is still open while the sweep runs.
    writer = other_conn.transaction()
    writer.__enter__()
    attach(other_conn, "post-in-flight", target)
    try:
        run = new_run(conn, "race")
        planned, executed = sweep(conn, bucket, run)
    finally:
        writer.__exit__(None, None, None)          # the application commits
    delete_owed_objects(conn, s3, run)
    assert planned.rows_deleted == 5  # the reference was not committed when the plan was made
    assert (executed.rows_deleted, executed.skipped_rereferenced) == (4, 1)
    assert skipped_ids(conn, run) == [target]
    assert existing(conn) == {target}
    assert not logged_keys(conn, run) & set(blob_keys(target))
    assert set(blob_keys(target)) <= object_keys(s3, bucket)
    # The next sweep sees the committed reference: the blob is not in its plan.
    rerun = new_run(conn, "race-2")
    again_planned, again = sweep(conn, bucket, rerun)
    assert (again_planned.rows_deleted, again_planned.kept_referenced) == (0, 1)
    assert again.rows_deleted == 0 and existing(conn) == {target}


def test_reference_committed_between_the_plan_and_the_execution_keeps_its_blob_and_marks_it_used(conn, s3, bucket):
    """The application attaches a planned blob after the plan, before the delete task: the DELETE's own re-check keeps
    it, the execution records it as skipped and marks it used again, and nothing of it is owed."""
    ids = make_blobs(conn, s3, bucket, 5)
    target = ids[2]
    set_unused_since(conn, ids, "3 days")

    def application_attaches() -> None:
        with conn.transaction():
            attach(conn, "post-after-the-plan", target)

    run = new_run(conn, "after-the-plan")
    planned, executed = sweep(conn, bucket, run, between=application_attaches)
    delete_owed_objects(conn, s3, run)
    assert planned.rows_deleted == 5
    assert (executed.rows_deleted, executed.skipped_rereferenced) == (4, 1)
    assert skipped_ids(conn, run) == [target]
    assert existing(conn) == {target} and unused(conn, target) is False
    assert not logged_keys(conn, run) & set(blob_keys(target))
    assert object_keys(s3, bucket) == set(blob_keys(target))


def test_reference_committed_while_the_execution_runs_keeps_a_blob_of_a_later_batch(
        conn, other_conn, test_dsn, s3, bucket):
    """The application attaches a planned blob while the delete task is in the middle of the plan (its first batch
    claimed and deleted, its transaction still open): the later batch that holds the blob claims and re-checks it in
    its own transaction, keeps it and marks it used again."""
    ids = make_blobs(conn, s3, bucket, 4, thumbnails=False)
    target = ids[3]
    set_unused_since(conn, ids, "3 days")
    bound = bound_app_blob(bucket)
    run = new_run(conn, "mid-execution")
    (planned,) = plan_sweep(conn, run, bound, cutoff=CUTOFF, batch_size=2)  # two batches: ids 0-1, then 2-3
    assert planned.batches == 2
    pass_gate(conn, run)
    # The test holds the run's row, so the first batch's transaction waits once it has written its deletions.
    hold = other_conn.transaction()
    hold.__enter__()
    done: dict[str, object] = {}
    try:
        other_conn.execute("SELECT 1 FROM blobgc.run WHERE dag_id = %s AND run_id = %s FOR UPDATE",
                           (run.dag_id, run.run_id))

        def delete_task() -> None:
            try:
                with pg_connect(test_dsn) as wconn:
                    done["pid"] = wconn.info.backend_pid
                    done["result"] = execute_sweep(wconn, run, bound, cutoff=CUTOFF)
            except BaseException as error:  # noqa: BLE001 - reported by the test
                done["error"] = error

        worker = threading.Thread(target=delete_task)
        worker.start()

        def first_batch_deleted_and_waiting() -> bool:
            return "pid" in done and conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %(pid)s AND wait_event_type = 'Lock') "
                "AND EXISTS (SELECT 1 FROM pg_locks WHERE pid = %(pid)s AND granted "
                "AND relation = 'app.blob'::regclass AND mode = 'RowExclusiveLock')", {"pid": done["pid"]}
            ).fetchone()[0]

        wait_until(first_batch_deleted_and_waiting)
        with conn.transaction():  # the application commits its reference while the first batch is open
            attach(conn, "post-mid-execution", target)
    finally:
        hold.__exit__(None, None, None)
    worker.join(60)
    assert "error" not in done, done.get("error")
    executed = done["result"]
    assert isinstance(executed, PlanExecution)
    assert (executed.rows_deleted, executed.skipped_rereferenced) == (3, 1)
    assert skipped_ids(conn, run) == [target]
    assert existing(conn) == {target} and unused(conn, target) is False
    assert logged_keys(conn, run) == {k for b in ids[:3] for k in blob_keys(b)}


def test_concurrent_writers_never_lose_a_referenced_blob(conn, test_dsn, s3, bucket):
    """Writers attach random garbage blobs while runs plan, execute and drain; every committed reference keeps its
    objects."""
    ids = make_blobs(conn, s3, bucket, 400, thumbnails=False)
    set_unused_since(conn, ids, "3 days")
    stop = threading.Event()
    attached: list[str] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(test_dsn, autocommit=True) as wconn:
            while not stop.is_set():
                blob_id = rng.choice(ids)
                try:
                    with wconn.transaction():
                        attach(wconn, f"post-{seed}-{blob_id}", blob_id)
                    attached.append(blob_id)
                except (psycopg.errors.ForeignKeyViolation, psycopg.errors.UniqueViolation):
                    pass  # the blob was already swept (or already attached): the app sees a clear error

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(4):
            run = new_run(conn, f"stress-{i}")
            sweep(conn, bucket, run, batch_size=25)
            delete_owed_objects(conn, s3, run)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert attached, "the writers attached nothing: the race was not exercised"
    referenced = {r[0] for r in conn.execute("SELECT DISTINCT blob_id FROM app.blob_attachment")}
    keys = object_keys(s3, bucket)
    assert referenced <= existing(conn)
    missing = [b for b in referenced if blob_keys(b)[0] not in keys]
    assert missing == []


def test_last_guard_splits_a_batch_when_a_reference_was_not_checked(conn, s3, bucket):
    """ON DELETE RESTRICT catches a reference the re-check did not see; the batch is split, not abandoned."""
    ids = make_blobs(conn, s3, bucket, 9, thumbnails=False)
    set_unused_since(conn, ids, "3 days")
    with conn.transaction():
        attach(conn, "p", ids[4])
    blind = ReferenceSet(foreign_keys=())  # a plan and a re-check that know no reference at all
    run = new_run(conn, "split")
    planned, executed = sweep(conn, bucket, run, refs=blind, execute_refs=blind)
    assert planned.rows_deleted == 9  # the blind plan holds the referenced blob too
    assert (executed.rows_deleted, executed.skipped_rereferenced) == (8, 1)
    assert existing(conn) == {ids[4]}
    assert unused(conn, ids[4]) is False
    assert not any(ids[4] in key for key, _, _ in owed(conn))


def test_crash_between_db_commit_and_s3_leaves_deletions_owed_for_the_next_run(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 3)
    set_unused_since(conn, ids, "3 days")
    run = new_run(conn, "crashing")
    sweep(conn, bucket, run)
    # The worker dies before S3 answers: here the S3 endpoint is unreachable.
    dead = s3_client("http://127.0.0.1:9", aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    with pytest.raises(EndpointConnectionError):
        delete_owed_objects(conn, dead, run)
    assert existing(conn) == set()
    assert len(owed(conn)) == 6                        # rows gone, objects owed, nothing forgotten
    assert len(object_keys(s3, bucket)) == 6

    next_run = new_run(conn, "next")
    drained = delete_owed_objects(conn, s3, next_run)
    assert drained.objects_deleted == 6 and drained.owed_after == 0
    assert object_keys(s3, bucket) == set()
    report = finish_run(conn, next_run)
    assert report["objects_deleted"] == 6 and report["bytes_reclaimed"] == 3 * (100 + 10)  # as the store reported them
    audit = conn.execute("SELECT DISTINCT run_id, deleted_by_run_id, owed FROM blobgc.deleted_object").fetchall()
    assert audit == [("crashing", "next", False)]


def test_delete_objects_errors_keep_those_keys_owed(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 3)
    set_unused_since(conn, ids, "3 days")
    refused = blob_keys(ids[1])[0]
    run = new_run(conn, "errors")
    sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, RefusingClient(s3, {refused}), run)
    assert drained.objects_deleted == 5 and drained.failed == 1 and drained.owed_after == 1
    assert owed(conn) == [(refused, 1, "AccessDenied: Access Denied")]
    assert object_keys(s3, bucket) == {refused}
    retry = new_run(conn, "errors-retry")
    assert delete_owed_objects(conn, s3, retry).objects_deleted == 1
    assert owed(conn) == [] and object_keys(s3, bucket) == set()


def test_dry_run_deletes_nothing_and_reports_what_would_go(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 4, size=250)
    set_unused_since(conn, ids[:3], "3 days")
    run = new_run(conn, "dry", dry_run=True)
    planned, executed = sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    report = finish_run(conn, run)
    assert (planned.rows_deleted, planned.objects_owed, planned.bytes_owed) == (3, 6, 750)
    assert (executed.items, executed.rows_deleted) == (0, 0)  # a dry run's delete task does nothing
    assert drained.objects_deleted == 0
    assert existing(conn) == set(ids)
    assert len(object_keys(s3, bucket)) == 8
    assert owed(conn) == []
    logged = conn.execute("SELECT count(*), bool_and(dry_run), bool_or(owed) FROM blobgc.deleted_object").fetchone()
    assert logged == (6, True, False)
    assert (report["rows_deleted"], report["objects_deleted"], report["bytes_reclaimed"]) == (3, 6, 750)
    daily = conn.execute("SELECT runs, objects_deleted FROM blobgc.reclaim_daily "
                         "WHERE dag_id = 'blobgc_sweep' AND dry_run").fetchone()
    assert daily == (1, 6)


def test_1001_blobs_cross_the_batch_boundary(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 1001, size=10)
    set_unused_since(conn, ids, "3 days")

    class Counting:
        def __init__(self, inner):
            self.inner, self.sizes = inner, []

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def delete_objects(self, Bucket, Delete):
            self.sizes.append(len(Delete["Objects"]))
            return self.inner.delete_objects(Bucket=Bucket, Delete=Delete)

    run = new_run(conn, "big")
    planned, executed = sweep(conn, bucket, run, batch_size=1000)
    counting = Counting(s3)
    drained = delete_owed_objects(conn, counting, run, batch_size=1000)
    assert planned.batches == 2 and planned.rows_deleted == 1001
    assert (executed.items, executed.batches, executed.rows_deleted) == (2, 2, 1001)
    assert drained.objects_deleted == 2002
    assert max(counting.sizes) == 1000 and sum(counting.sizes) == 2002 and len(counting.sizes) == 3
    assert existing(conn) == set() and object_keys(s3, bucket) == set()


def test_real_deletions_add_to_reclaim_daily(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 5, size=1000)
    set_unused_since(conn, ids, "3 days")
    run = new_run(conn, "reclaim")
    sweep(conn, bucket, run)
    delete_owed_objects(conn, s3, run)
    row = conn.execute("SELECT runs, rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.reclaim_daily "
                       "WHERE dag_id = 'blobgc_sweep' AND NOT dry_run AND day = (SELECT (started_at AT TIME ZONE 'UTC')::date "
                       "FROM blobgc.run WHERE dag_id = %s AND run_id = %s)", (run.dag_id, run.run_id)).fetchone()
    assert row == (1, 5, 10, 5 * (1000 + 10))  # raw and thumbnail bytes, as the store reported them


def test_two_sweeps_at_once_delete_each_blob_once(conn, test_dsn, s3, bucket):
    """Two runs plan the same 300 blobs, then execute their plans at the same time: each blob is deleted, logged and
    owed once."""
    ids = make_blobs(conn, s3, bucket, 300, thumbnails=False)
    set_unused_since(conn, ids, "3 days")
    bound = bound_app_blob(bucket)
    planned: dict[str, int] = {}
    results: dict[str, int] = {}
    both_planned = threading.Barrier(2)

    def worker(name: str) -> None:
        with psycopg.connect(test_dsn, autocommit=True) as wconn:
            run = new_run(wconn, name)
            planned[name] = plan_sweep(wconn, run, bound, cutoff=CUTOFF, batch_size=20)[0].rows_deleted
            pass_gate(wconn, run)
            both_planned.wait(60)
            results[name] = execute_sweep(wconn, run, bound, cutoff=CUTOFF).rows_deleted

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert planned == {"w0": 300, "w1": 300}
    assert sum(results.values()) == 300
    logged = conn.execute("SELECT count(*), count(DISTINCT key) FROM blobgc.deleted_object").fetchone()
    assert logged == (600, 600)


@pytest.mark.parametrize("analyzed", [True, False], ids=["from-statistics", "walking-the-index"])
def test_key_range_shards_split_the_work_without_overlap(conn, s3, bucket, analyzed):
    ids = make_blobs(conn, s3, bucket, 200, thumbnails=False)
    set_unused_since(conn, ids, "3 days")
    conn.execute("ANALYZE app.blob" if analyzed else "DELETE FROM pg_statistic WHERE starelid = 'app.blob'::regclass")
    shards = split_key_space(conn, 3, IdColumn("app.blob"))
    assert len(shards) >= 2
    refs, bound = discover_references(conn, "app.blob"), bound_app_blob(bucket)
    dry_run = new_run(conn, "dry", dry_run=True)
    dry = [p.rows_deleted for p in plan_sweep(conn, dry_run, bound, cutoff=CUTOFF, refs=refs, key_ranges=tuple(shards))]
    assert sum(dry) == 200 and all(n > 0 for n in dry)
    assert existing(conn) == set(ids)
    run = new_run(conn, "real")
    planned = [p.rows_deleted for p in plan_sweep(conn, run, bound, cutoff=CUTOFF, refs=refs, key_ranges=tuple(shards))]
    assert planned == dry
    pass_gate(conn, run)
    real = [execute_sweep(conn, run, bound, cutoff=CUTOFF, refs=refs, key_range=shard).rows_deleted for shard in shards]
    assert real == dry
    assert existing(conn) == set()


def test_the_s3_server_refusing_keys_keeps_them_owed_until_allowed(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 3)
    set_unused_since(conn, ids, "3 days")
    deny_deletes(s3, bucket, f"blobs/{ids[0]}/")
    run = new_run(conn, "policy")
    sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    assert drained.objects_deleted == 4 and drained.failed == 2
    assert [(k, e) for k, _, e in owed(conn)] == [(k, "AccessDenied: Access Denied") for k in blob_keys(ids[0])]
    assert object_keys(s3, bucket) == set(blob_keys(ids[0]))
    s3.delete_bucket_policy(Bucket=bucket)
    again = delete_owed_objects(conn, s3, new_run(conn, "policy-lifted"))
    assert again.objects_deleted == 2 and again.owed_after == 0
    assert object_keys(s3, bucket) == set()


@pytest.mark.parametrize("action", ["CASCADE", "SET NULL"])
def test_cascade_or_set_null_reference_added_after_discovery_stops_the_delete(conn, s3, bucket, action):
    """Finding 4 (ON DELETE CASCADE / SET NULL): such a key does not make the DELETE fail, so the deleting statement
    re-checks every reference itself, and notices a key added since the references were discovered."""
    referenced, garbage = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [referenced, garbage], "3 days")  # marked unused before the new table existed
    refs = discover_references(conn, "app.blob")  # the plan and the delete task found their references ...

    def application_adds_a_table() -> None:  # ... and then the application added a table that references blobs
        with conn.transaction():
            conn.execute("CREATE SCHEMA IF NOT EXISTS cascade_test")
            conn.execute("DROP TABLE IF EXISTS cascade_test.gallery")
            conn.execute(f"CREATE TABLE cascade_test.gallery (id int PRIMARY KEY, blob_id text "
                         f"REFERENCES app.blob ON DELETE {action})")
            conn.execute("INSERT INTO cascade_test.gallery VALUES (1, %s)", (referenced,))

    try:
        run = new_run(conn, f"cascade-{action}")
        planned, executed = sweep(conn, bucket, run, refs=refs, execute_refs=refs, between=application_adds_a_table)
        assert planned.rows_deleted == 2
        assert (executed.rows_deleted, executed.skipped_rereferenced) == (1, 1)
        assert existing(conn) == {referenced}
        assert conn.execute("SELECT blob_id FROM cascade_test.gallery").fetchall() == [(referenced,)]
        assert {k for k, _, _ in owed(conn)} == set(blob_keys(garbage))
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA cascade_test CASCADE")


def test_cascade_reference_known_at_discovery_keeps_its_blob_and_row(conn, s3, bucket):
    """Finding 4: with the CASCADE key known, the DELETE's own NOT EXISTS keeps the blob and the referencing row."""
    referenced, garbage = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("CREATE SCHEMA IF NOT EXISTS cascade_test")
        conn.execute("DROP TABLE IF EXISTS cascade_test.gallery")
        conn.execute("CREATE TABLE cascade_test.gallery (id int PRIMARY KEY, blob_id text "
                     "REFERENCES app.blob ON DELETE CASCADE)")
    try:
        set_unused_since(conn, [referenced, garbage], "3 days")
        refs = discover_references(conn, "app.blob")

        def application_references() -> None:  # after the plan: the execution's claim must not trust the stale flag
            with conn.transaction():
                conn.execute("INSERT INTO cascade_test.gallery VALUES (1, %s)", (referenced,))

        run = new_run(conn, "cascade-known")
        planned, blind_to_the_select = sweep(conn, bucket, run, refs=refs, execute_refs=refs,
                                             between=application_references)
        assert planned.rows_deleted == 2
        assert blind_to_the_select.rows_deleted == 1
        assert existing(conn) == {referenced}
        assert conn.execute("SELECT count(*) FROM cascade_test.gallery").fetchone()[0] == 1
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA cascade_test CASCADE")


def test_retried_dry_run_counts_once_in_reclaim_daily(conn, s3, bucket):
    """Finding 12 (dry run counted twice): a dry run's planning tasks of the same range, retried, report its blobs
    once."""
    ids = make_blobs(conn, s3, bucket, 4, size=100)
    set_unused_since(conn, ids, "3 days")
    run, bound = new_run(conn, "dry-retried", dry_run=True), bound_app_blob(bucket)
    (first,) = plan_sweep(conn, run, bound, cutoff=CUTOFF)
    (second,) = plan_sweep(conn, run, bound, cutoff=CUTOFF)  # the same tasks, retried
    pass_gate(conn, run)
    assert execute_sweep(conn, run, bound, cutoff=CUTOFF).rows_deleted == 0
    assert first.rows_deleted == second.rows_deleted == 4
    daily = conn.execute("SELECT runs, rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.reclaim_daily "
                         "WHERE dag_id = 'blobgc_sweep' AND dry_run").fetchone()
    assert daily == (1, 4, 8, 400)
    logged = conn.execute("SELECT count(*), count(DISTINCT key) FROM blobgc.deleted_object WHERE dry_run").fetchone()
    assert logged == (8, 8)


def test_reclaim_counts_only_objects_that_existed_with_their_real_sizes(conn, s3, bucket):
    """Finding 13 (reclaim accounting): a blob without a thumbnail counts one object, and the thumbnail of another
    counts its real bytes; an absent key is settled as absent, not deleted."""
    with_thumb = make_blobs(conn, s3, bucket, 1, prefix="t", size=300)[0]
    without_thumb = make_blobs(conn, s3, bucket, 1, prefix="n", size=200, thumbnails=False)[0]
    set_unused_since(conn, [with_thumb, without_thumb], "3 days")
    run = new_run(conn, "exact")
    sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.absent) == (3, 1)
    report = finish_run(conn, run)
    assert (report["objects_deleted"], report["bytes_reclaimed"]) == (3, 300 + 10 + 200)
    absent = conn.execute("SELECT key FROM blobgc.deleted_object WHERE absent_at IS NOT NULL").fetchall()
    assert absent == [(blob_keys(without_thumb)[1],)]
    assert object_keys(s3, bucket) == set()


def test_reclaim_on_a_versioned_bucket_leaves_no_delete_marker_for_an_absent_key(conn, s3, versioned_bucket):
    """Finding 13: the key that never existed gets no delete marker (a restore would otherwise 'bring back' nothing)."""
    blob = make_blobs(conn, s3, versioned_bucket, 1, thumbnails=False)[0]
    set_unused_since(conn, [blob], "3 days")
    run = new_run(conn, "versioned-exact")
    sweep(conn, versioned_bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.absent) == (1, 1)
    markers = [m["Key"] for page in s3.get_paginator("list_object_versions").paginate(Bucket=versioned_bucket)
               for m in page.get("DeleteMarkers", [])]
    assert markers == [blob_keys(blob)[0]]
