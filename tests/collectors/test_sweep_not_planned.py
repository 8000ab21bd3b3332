"""A first sweep that explains itself (issue 30): each planning task counts the rows it considered and why each one
not planned was not (referenced, not marked unused yet, within the grace, created within it), with the time the
first becomes eligible; the report sums the ranges into `blobgc.run.details["not_planned"]`.

Runs go the way blobgc_sweep's tasks go (tests/support/sweep.py); the report's gathering is `NotPlannedReport`, the
kind blobgc_sweep's report task reads the planning tasks' results with.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from blobgc.collectors.mark import mark_collection, mark_in_columns
from blobgc.collectors.sweep import NotPlannedReport
from blobgc.kinds.blobs import bound_app_blob
from blobgc.core.runs import RunRef, ensure_run, finish_run
from tests.helpers import make_blobs
from tests.support.collections import add_upload, bound_shop, create_shop, new_schema
from tests.support.sweep import plan_sweep, references_of

GRACE = timedelta(hours=24)  # the collections' own grace (shop_yaml's and app_blob's default)


def utc(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc)


def utc_iso(moment: datetime) -> str:
    return utc(moment).isoformat()


def dry_run(conn, run_id: str) -> RunRef:
    """A dry run of blobgc_sweep whose reference time is the database's now (as a run triggered by hand)."""
    return ensure_run(conn, RunRef("blobgc_sweep", run_id, dry_run=True))


def reported(conn, run: RunRef, results) -> dict:
    """What the report task records: the planning tasks' results gathered (NotPlannedReport), then run details."""
    finish_run(conn, run, {"not_planned": NotPlannedReport.total([r.to_xcom() for r in results])})
    return conn.execute("SELECT details -> 'not_planned' FROM blobgc.run WHERE dag_id = %s AND run_id = %s",
                        (run.dag_id, run.run_id)).fetchone()[0]


def test_fresh_install_first_sweep_dry_run_reports_rows_within_grace_with_the_time_the_first_becomes_eligible(
        conn, s3, bucket, caplog):
    """A collection just marked for the first time (nothing backdated): its unused rows are within their grace, and
    the first becomes eligible at its unused-since plus the grace; rows added after the mark are not marked yet;
    referenced rows are referenced; a row whose mark is old but that was created after the others' mark is young."""
    schema = new_schema()
    create_shop(conn, schema)
    for i in range(1, 7):
        add_upload(conn, s3, schema, bucket, i, f"content-{i}".encode())
    with conn.transaction():
        conn.execute(f"INSERT INTO {schema}.product VALUES (1, 1), (2, NULL)")  # a foreign key (a NULL: nothing)
        conn.execute(f"INSERT INTO {schema}.attachment (target_kind, target_id) VALUES ('upload', 2)")  # extra query
    bound = bound_shop(conn, schema, bucket, name=schema)
    refs = references_of(conn, bound)
    assert mark_collection(conn, bound, refs).became_unused == 4  # the first mark: 3, 4, 5, 6, unused since now

    add_upload(conn, s3, schema, bucket, 7, b"content-7")  # created after the first mark...
    assert mark_collection(conn, bound, refs).became_unused == 1
    with conn.transaction():  # ...and, as if a mark had found it unused long ago: only its created_at holds it back
        conn.execute(f"UPDATE blobgc.mark_{schema} SET unused_since = now() - interval '2 days' WHERE id = 7")
    add_upload(conn, s3, schema, bucket, 8, b"content-8")  # no mark since these appeared
    add_upload(conn, s3, schema, bucket, 9, b"content-9")

    run = dry_run(conn, f"first-{schema}")
    cutoff = run.reference_time - GRACE
    with caplog.at_level(logging.INFO, logger="blobgc.collectors.sweep"):
        results = plan_sweep(conn, run, bound, cutoff=cutoff, refs=refs, key_ranges=((None, "5"), ("5", None)))
        not_planned = reported(conn, run, results)

    first_unused, young_created, young_unused = conn.execute(
        f"SELECT (SELECT min(unused_since) FROM blobgc.mark_{schema} WHERE id <> 7), "
        f"(SELECT created_at FROM {schema}.upload WHERE id = 7), "
        f"(SELECT unused_since FROM blobgc.mark_{schema} WHERE id = 7)").fetchone()
    assert young_unused < cutoff <= young_created  # upload 7 waits for its created_at only...
    assert young_created > first_unused  # ...and becomes eligible after the first of the others
    assert sum(r.rows_deleted for r in results) == 0
    assert not_planned == {schema: {
        "considered": 9, "planned": 0, "referenced": 2, "not_marked": 2, "within_grace": 4, "young_created_at": 1,
        "first_eligible_at": utc_iso(first_unused + GRACE), "grace_hours": 24}}
    assert datetime.fromisoformat(not_planned[schema]["first_eligible_at"]) == first_unused + GRACE
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{schema}:")]
    assert len(lines) == 1, caplog.text  # the report's sentence for the collection (the plan tasks' name ranges)
    assert (f"{schema}: 9 rows considered: 0 planned, 4 unused but within their grace (24 h from the mark that "
            "found them unused), 1 unused but created less than 24 h ago (created_at), 2 referenced, 2 not marked "
            "unused yet") in lines[0]
    assert "run blobgc_mark first; the grace counts from the first mark" in lines[0]
    assert f"the first of them becomes eligible at {utc(first_unused + GRACE):%Y-%m-%d %H:%M:%S} UTC" in lines[0]
    assert sum(1 for r in caplog.records if r.getMessage().startswith(f"{schema} ids ")) == 2  # one per plan task


def test_first_sweep_of_app_blob_counts_each_row_once_and_plans_only_the_eligible(conn, s3, bucket, caplog):
    """app_blob keeps its mark state in its own columns: a blob the first mark found unused just now is within its
    grace until its updated_at plus the grace; a referenced one, one added after the mark, one unused long enough
    but created just now, and one eligible (planned) each count once."""
    referenced, within, young, eligible = make_blobs(conn, s3, bucket, 4)
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (referenced,))
    refs = references_of(conn, bound_app_blob(bucket))
    assert mark_in_columns(conn, bound_app_blob(""), refs).became_unused == 3
    with conn.transaction():  # as if the mark had found these unused two days ago; `young` was created after it
        conn.execute("UPDATE app.blob SET updated_at = now() - interval '2 days' WHERE id = ANY(%s)",
                     ([young, eligible],))
        conn.execute("UPDATE app.blob SET created_at = now() WHERE id = %s", (young,))
        conn.execute("UPDATE app.blob SET created_at = now() - interval '2 days' WHERE id = %s", (eligible,))
    (never_marked,) = make_blobs(conn, s3, bucket, 1, prefix="n")

    run = dry_run(conn, "first-app-blob")
    with caplog.at_level(logging.INFO, logger="blobgc.collectors.sweep"):
        (planned,) = plan_sweep(conn, run, bound_app_blob(bucket), cutoff=run.reference_time - GRACE, refs=refs)
    within_since, young_created = conn.execute(
        "SELECT (SELECT updated_at FROM app.blob WHERE id = %s), (SELECT created_at FROM app.blob WHERE id = %s)",
        (within, young)).fetchone()
    assert young_created > within_since  # the within-grace blob becomes eligible first
    assert planned.rows_deleted == 1
    assert planned.not_planned == {"app_blob": {
        "considered": 5, "planned": 1, "referenced": 1, "not_marked": 1, "within_grace": 1, "young_created_at": 1,
        "first_eligible_at": utc_iso(within_since + GRACE), "grace_hours": 24}}
    (line,) = [r.getMessage() for r in caplog.records if "rows considered" in r.getMessage()]
    assert line.startswith("app_blob ids start..end: 5 rows considered: 1 planned, 1 unused but within their grace")
    assert never_marked


def test_a_collection_never_marked_reports_every_unreferenced_row_not_marked_yet(conn, s3, bucket, caplog):
    """Before the first mark (no mark table yet), nothing is planned, and the log says to run blobgc_mark first."""
    schema = new_schema()
    create_shop(conn, schema)
    for i in range(1, 4):
        add_upload(conn, s3, schema, bucket, i, f"content-{i}".encode())
    with conn.transaction():
        conn.execute(f"INSERT INTO {schema}.product VALUES (1, 1)")
    bound = bound_shop(conn, schema, bucket, name=schema)
    assert not bound.mark_table_exists(conn)
    run = dry_run(conn, f"unmarked-{schema}")
    with caplog.at_level(logging.INFO, logger="blobgc.collectors.sweep"):
        (planned,) = plan_sweep(conn, run, bound, cutoff=run.reference_time - GRACE)
    assert planned.rows_deleted == 0
    assert planned.not_planned == {schema: {
        "considered": 3, "planned": 0, "referenced": 1, "not_marked": 2, "within_grace": 0, "young_created_at": 0,
        "first_eligible_at": None, "grace_hours": 24}}
    assert "2 not marked unused yet (no mark has found them unused since they appeared: run blobgc_mark first; " \
           "the grace counts from the first mark)" in caplog.text


def test_a_row_whose_created_at_is_null_counts_as_young_and_never_as_eligible(conn, s3, bucket):
    """The plan takes a row only if its created_at is before the cut-off, so a NULL created_at is never planned: the
    count says so (young_created_at, not planned) and gives it no eligible time; a row past its grace plans."""
    schema = new_schema()
    create_shop(conn, schema)
    for i in (1, 2):
        add_upload(conn, s3, schema, bucket, i, f"content-{i}".encode())
    bound = bound_shop(conn, schema, bucket, name=schema)
    refs = references_of(conn, bound)
    assert mark_collection(conn, bound, refs).became_unused == 2
    with conn.transaction():  # as if the mark had found both unused long ago; upload 1's creation is unknown
        conn.execute(f"UPDATE blobgc.mark_{schema} SET unused_since = now() - interval '3 days'")
        conn.execute(f"ALTER TABLE {schema}.upload ALTER created_at DROP NOT NULL")
        conn.execute(f"UPDATE {schema}.upload SET created_at = CASE id WHEN 1 THEN NULL "
                     "ELSE now() - interval '3 days' END")
    run = dry_run(conn, f"null-created-{schema}")
    results = plan_sweep(conn, run, bound, cutoff=run.reference_time - GRACE, refs=refs)
    assert sum(r.rows_deleted for r in results) == 1
    assert reported(conn, run, results) == {schema: {
        "considered": 2, "planned": 1, "referenced": 0, "not_marked": 0, "within_grace": 0, "young_created_at": 1,
        "first_eligible_at": None, "grace_hours": 24}}
