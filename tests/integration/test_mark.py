"""blobgc_mark's library against the real PostgreSQL: reference discovery, flips, page usages, visibility."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from blobgc.clients import pg_connect
from blobgc.key_space import key_ranges
from blobgc.mark import mark_unused_blobs
from blobgc.pages import poll_page_usage, remove_stale_page_usages
from blobgc.references import discover_references
from blobgc.runs import RunRef, ensure_run

from .conftest import make_blobs, set_unused_since


def flags(conn) -> dict[str, tuple[bool, datetime, str]]:
    return {r[0]: (r[1], r[2], r[3]) for r in conn.execute("SELECT id, unused, updated_at, visibility FROM app.blob")}


def attach(conn, post_id: str, blob_id: str) -> None:
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES (%s) ON CONFLICT DO NOTHING", (post_id,))
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES (%s, %s)", (post_id, blob_id))


def test_discovers_the_contract_foreign_keys(conn):
    refs = discover_references(conn)
    names = {r.name for r in refs.foreign_keys}
    assert {"app.blob_attachment.blob_id", "app.page_using_blob.blob_id"} <= names
    assert all(r.indexed for r in refs.foreign_keys)


def test_mark_flips_only_changed_rows_and_stamps_the_flip_time(conn, s3, bucket):
    used, fresh, old = make_blobs(conn, s3, bucket, 3)
    attach(conn, "p1", used)
    set_unused_since(conn, [old], "5 days")
    before = flags(conn)

    result = mark_unused_blobs(conn, discover_references(conn))

    after = flags(conn)
    assert (result.became_unused, result.became_used) == (1, 0)
    assert after[used] == before[used]                      # untouched: no flip
    assert after[old] == before[old]                        # already unused: its flip time is kept
    assert after[fresh][0] is True and after[fresh][1] > before[fresh][1]

    attach(conn, "p2", old)                                 # used again
    result = mark_unused_blobs(conn, discover_references(conn))
    again = flags(conn)
    assert (result.became_unused, result.became_used) == (0, 1)
    assert again[old][0] is False and again[old][1] > after[old][1]
    assert again[fresh] == after[fresh]


def test_second_pass_with_no_changes_flips_nothing(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 50, thumbnails=False)
    for blob_id in ids[:20]:
        attach(conn, f"p-{blob_id}", blob_id)
    refs = discover_references(conn)
    first = mark_unused_blobs(conn, refs, range_size=7)
    second = mark_unused_blobs(conn, refs, range_size=7)
    assert first.became_unused == 30 and first.ranges > 1
    assert (second.became_unused, second.became_used) == (0, 0)


def covered(conn, ranges) -> int:
    total = 0
    for lo, hi in ranges:
        total += conn.execute("SELECT count(*) FROM app.blob WHERE (%(lo)s::text IS NULL OR id >= %(lo)s) "
                              "AND (%(hi)s::text IS NULL OR id < %(hi)s)", {"lo": lo, "hi": hi}).fetchone()[0]
    return total


def test_key_ranges_from_stale_statistics_still_cover_every_blob(conn, s3, bucket):
    make_blobs(conn, s3, bucket, 300, prefix="m", thumbnails=False)
    conn.execute("ANALYZE app.blob")
    make_blobs(conn, s3, bucket, 5, prefix="0", thumbnails=False)   # sorts before every bound
    make_blobs(conn, s3, bucket, 5, prefix="z", thumbnails=False)   # sorts after every bound
    ranges = key_ranges(conn, 50)
    assert len(ranges) >= 4 and ranges[0][0] is None and ranges[-1][1] is None
    assert covered(conn, ranges) == 310
    result = mark_unused_blobs(conn, discover_references(conn), range_size=50, workers=2,
                               connect=lambda: pg_connect(conn.info.dsn))
    assert result.became_unused == 310


def test_key_ranges_without_statistics_walk_the_index(conn, s3, bucket):
    make_blobs(conn, s3, bucket, 23, thumbnails=False)
    conn.execute("DELETE FROM pg_statistic WHERE starelid = 'app.blob'::regclass")
    ranges = key_ranges(conn, 5)
    assert len(ranges) == 5 and ranges[-1][1] is None
    assert covered(conn, ranges) == 23


def test_a_referencing_table_created_later_protects_its_blobs(conn, s3, bucket):
    covered, loose = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("CREATE SCHEMA IF NOT EXISTS catalog_test")
        conn.execute("DROP TABLE IF EXISTS catalog_test.album_cover")
        conn.execute("CREATE TABLE catalog_test.album_cover (album text PRIMARY KEY, "
                     "cover_blob text REFERENCES app.blob ON DELETE RESTRICT)")
        conn.execute("INSERT INTO catalog_test.album_cover VALUES ('a1', %s)", (covered,))
    try:
        refs = discover_references(conn)
        assert "catalog_test.album_cover.cover_blob" in refs.describe()
        mark_unused_blobs(conn, refs)
        after = flags(conn)
        assert after[covered][0] is False
        assert after[loose][0] is True
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA catalog_test CASCADE")


def test_declared_extra_sql_reference_protects_its_blob(conn, s3, bucket):
    kept, loose = make_blobs(conn, s3, bucket, 2)
    refs = discover_references(conn, extra_sql=[f"SELECT '{kept}'::text"])
    mark_unused_blobs(conn, refs)
    after = flags(conn)
    assert after[kept][0] is False and after[loose][0] is True


def test_stale_page_usages_are_removed_and_visibility_follows(conn, s3, bucket):
    live, stale, unused_page = make_blobs(conn, s3, bucket, 3)
    poll_page_usage(conn, live, "/live")
    poll_page_usage(conn, stale, "/old")
    poll_page_usage(conn, unused_page, "/hidden")
    with conn.transaction():
        conn.execute("UPDATE app.page_using_blob SET updated_at = now() - interval '40 days' WHERE url = '/old'")
        conn.execute("UPDATE app.page_using_blob SET in_use = false WHERE url = '/hidden'")
    assert flags(conn)[stale][2] == "PUBLIC"

    run = RunRef("blobgc_mark", "test-pages")
    ensure_run(conn, run)
    removed = remove_stale_page_usages(conn, run, cutoff=datetime.now(timezone.utc) - timedelta(days=30))
    result = mark_unused_blobs(conn, discover_references(conn))

    after = flags(conn)
    assert removed == 1
    assert after[live][0] is False and after[live][2] == "PUBLIC"
    assert after[stale][0] is True and after[stale][2] == "PRIVATE"      # no usage left at all
    assert after[unused_page][0] is False and after[unused_page][2] == "PRIVATE"  # row still references it
    assert result.visibility_changed == 2
    rows = conn.execute("SELECT rows_deleted FROM blobgc.run WHERE run_id = 'test-pages'").fetchone()[0]
    assert rows == 1


def test_dry_run_mark_changes_nothing(conn, s3, bucket):
    make_blobs(conn, s3, bucket, 4)
    before = flags(conn)
    result = mark_unused_blobs(conn, discover_references(conn), dry_run=True)
    assert result.became_unused == 4
    assert flags(conn) == before


def test_dry_run_page_sweep_removes_nothing(conn, s3, bucket):
    (blob,) = make_blobs(conn, s3, bucket, 1)
    poll_page_usage(conn, blob, "/old")
    with conn.transaction():
        conn.execute("UPDATE app.page_using_blob SET updated_at = now() - interval '40 days'")
    run = RunRef("blobgc_mark", "test-pages-dry", dry_run=True)
    ensure_run(conn, run)
    n = remove_stale_page_usages(conn, run, cutoff=datetime.now(timezone.utc) - timedelta(days=30))
    assert n == 1
    assert conn.execute("SELECT count(*) FROM app.page_using_blob").fetchone()[0] == 1


# ---------------------------------------------------------------- issue 15: references blobgc must follow exactly
import contextlib  # noqa: E402

import pytest  # noqa: E402

from blobgc.references import UnfollowableReference  # noqa: E402


@contextlib.contextmanager
def scratch_schema(conn, *statements: str):
    """A schema of the test's own, with `statements` run in it; dropped (with any index on app.blob) afterwards."""
    with conn.transaction():
        conn.execute("DROP SCHEMA IF EXISTS refs_test CASCADE")
        conn.execute("CREATE SCHEMA refs_test")
        for statement in statements:
            conn.execute(statement)
    try:
        yield
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA refs_test CASCADE")
            conn.execute("DROP INDEX IF EXISTS app.refs_test_blob_filename, app.refs_test_blob_id_mimetype")


def test_null_reference_in_a_nullable_foreign_key_hides_no_unused_blob(conn, s3, bucket):
    """Finding 1 (NULL reference): a NULL in a nullable referencing column references nothing; the others are marked."""
    used, loose = make_blobs(conn, s3, bucket, 2)
    with scratch_schema(conn, "CREATE TABLE refs_test.banner (id int PRIMARY KEY, image text NULL REFERENCES app.blob)",
                        f"INSERT INTO refs_test.banner VALUES (1, '{used}'), (2, NULL)"):
        result = mark_unused_blobs(conn, discover_references(conn))
        after = flags(conn)
        assert result.became_unused == 1
        assert after[loose][0] is True and after[used][0] is False


def test_null_reference_returned_by_an_extra_query_is_ignored(conn, s3, bucket):
    """Finding 1 (NULL reference): an extra reference query yielding NULL neither fails the mark nor hides blobs."""
    kept, loose = make_blobs(conn, s3, bucket, 2)
    refs = discover_references(conn, extra_sql=[f"SELECT '{kept}'::text UNION ALL SELECT NULL::text"])
    result = mark_unused_blobs(conn, refs)
    after = flags(conn)
    assert result.became_unused == 1
    assert after[loose][0] is True and after[kept][0] is False


def test_foreign_key_to_a_unique_column_other_than_the_primary_key_is_followed(conn, s3, bucket):
    """Finding 4 (confkey): a key referencing app.blob's unique `filename`, not its id, protects the blob."""
    covered, loose = make_blobs(conn, s3, bucket, 2)
    with scratch_schema(conn, "CREATE UNIQUE INDEX refs_test_blob_filename ON app.blob (filename)",
                        "CREATE TABLE refs_test.by_name (name text REFERENCES app.blob (filename))",
                        f"INSERT INTO refs_test.by_name VALUES ('{covered}.bin')"):
        refs = discover_references(conn)
        mark_unused_blobs(conn, refs)
        after = flags(conn)
        assert after[covered][0] is False and after[loose][0] is True
        (ref,) = [r for r in refs.foreign_keys if r.schema == "refs_test"]
        assert ref.target_columns == ("filename",)


def test_composite_foreign_key_that_includes_the_blob_id_is_followed(conn, s3, bucket):
    """Finding 4 (composite key): a two-column key (blob id, mimetype) protects the blob it matches, and only it."""
    covered, other_type, loose = make_blobs(conn, s3, bucket, 3)
    with scratch_schema(conn, "CREATE UNIQUE INDEX refs_test_blob_id_mimetype ON app.blob (id, mimetype)",
                        "CREATE TABLE refs_test.typed (blob_id text, mime text, "
                        "FOREIGN KEY (blob_id, mime) REFERENCES app.blob (id, mimetype))",
                        f"INSERT INTO refs_test.typed VALUES ('{covered}', 'application/octet-stream'), "
                        f"('{other_type}', NULL)"):
        refs = discover_references(conn)
        mark_unused_blobs(conn, refs)
        after = flags(conn)
        # a key with a NULL column (MATCH SIMPLE) references nothing
        assert after[covered][0] is False and after[other_type][0] is True and after[loose][0] is True
        (ref,) = [r for r in refs.foreign_keys if r.schema == "refs_test"]
        assert (ref.columns, ref.target_columns) == (("blob_id", "mime"), ("id", "mimetype"))


def test_foreign_key_blobgc_cannot_follow_fails_the_mark_naming_the_constraint(conn, s3, bucket):
    """Finding 4 (unfollowable): a referencing table this role may not read fails discovery, naming the constraint."""
    make_blobs(conn, s3, bucket, 1)
    with scratch_schema(conn, "CREATE TABLE refs_test.secret (blob_id text CONSTRAINT secret_blob_fk "
                              "REFERENCES app.blob)"):
        with conn.transaction():
            conn.execute("DO $$ BEGIN CREATE ROLE blobgc_limited_test; EXCEPTION WHEN duplicate_object THEN NULL; "
                         "END $$")
            conn.execute("GRANT USAGE ON SCHEMA app, refs_test TO blobgc_limited_test")
            conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA app TO blobgc_limited_test")
        conn.execute("SET ROLE blobgc_limited_test")
        try:
            with pytest.raises(UnfollowableReference, match="secret_blob_fk"):
                discover_references(conn)
        finally:
            conn.execute("RESET ROLE")
            with conn.transaction():
                conn.execute("REVOKE ALL ON ALL TABLES IN SCHEMA app FROM blobgc_limited_test")
                conn.execute("REVOKE USAGE ON SCHEMA app, refs_test FROM blobgc_limited_test")


@pytest.mark.parametrize("query, problem", [
    ("SELECT no_such_column FROM app.blob", "fails"),
    ("SELECT id, filename FROM app.blob", "returns 2 columns"),
    ("SELECT 42", "returns a column of type integer"),
    ("WITH gone AS (DELETE FROM app.post RETURNING id) SELECT id FROM gone", "fails"),
])
def test_extra_reference_sql_that_is_wrong_fails_before_anything_is_written(conn, s3, bucket, query, problem):
    """Finding 17 (extra SQL): an extra query that errors, writes, or returns the wrong shape or type fails discovery
    naming the query; nothing is marked."""
    ids = make_blobs(conn, s3, bucket, 2)
    before = flags(conn)
    with pytest.raises(UnfollowableReference) as refused:
        discover_references(conn, extra_sql=["SELECT id FROM app.blob", query])
    assert f"extra reference query [1] {problem}" in str(refused.value)
    assert query[:40] in str(refused.value)
    assert flags(conn) == before and set(before) == set(ids)


def test_extra_reference_sql_that_is_wrong_fails_the_mark_dag_first(conn, s3, bucket):
    """Finding 17 (extra SQL): through Airflow, the mark's first task fails naming the query; no page usage is removed
    and no blob flips."""
    from .conftest import airflow

    blob = make_blobs(conn, s3, bucket, 1)[0]
    poll_page_usage(conn, blob, "/stale")
    with conn.transaction():
        conn.execute("UPDATE app.page_using_blob SET updated_at = now() - interval '40 days'")
    before = flags(conn)
    result = airflow("dags", "test", "blobgc_mark",
                     env_extra={"AIRFLOW_VAR_BLOBGC_EXTRA_BLOB_REFERENCES": '["SELECT 42"]'})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "extra reference query [0] returns a column of type integer" in output, \
        output[-3000:]
    assert flags(conn) == before
    assert conn.execute("SELECT count(*) FROM app.page_using_blob").fetchone()[0] == 1
