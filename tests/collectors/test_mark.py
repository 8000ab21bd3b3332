"""blobgc.collectors.mark: seed 000's mark through every reference, and the page-usage sweep."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from blobgc.collectors.mark import mark_in_columns
from blobgc.kinds.blobs.pages import remove_stale_page_usages
from blobgc.core.references import discover_references
from blobgc.core.runs import RunRef, ensure_run
from blobgc.kinds.blobs import bound_app_blob
from demo_app.blobs import poll_page_usage
from tests.helpers import make_blobs, set_unused_since
from tests.support.references import flags, scratch_schema


def attach(conn, post_id: str, blob_id: str) -> None:
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES (%s) ON CONFLICT DO NOTHING", (post_id,))
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES (%s, %s)", (post_id, blob_id))


def test_mark_flips_only_changed_rows_and_stamps_the_flip_time(conn, s3, bucket):
    used, fresh, old = make_blobs(conn, s3, bucket, 3)
    attach(conn, "p1", used)
    set_unused_since(conn, [old], "5 days")
    before = flags(conn)

    result = mark_in_columns(conn, bound_app_blob(""), discover_references(conn, "app.blob"))

    after = flags(conn)
    assert (result.became_unused, result.became_used) == (1, 0)
    assert after[used] == before[used]                      # untouched: no flip
    assert after[old] == before[old]                        # already unused: its flip time is kept
    assert after[fresh][0] is True and after[fresh][1] > before[fresh][1]

    attach(conn, "p2", old)                                 # used again
    result = mark_in_columns(conn, bound_app_blob(""), discover_references(conn, "app.blob"))
    again = flags(conn)
    assert (result.became_unused, result.became_used) == (0, 1)
    assert again[old][0] is False and again[old][1] > after[old][1]
    assert again[fresh] == after[fresh]


def test_second_pass_with_no_changes_flips_nothing(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 50, thumbnails=False)
    for blob_id in ids[:20]:
        attach(conn, f"p-{blob_id}", blob_id)
    refs = discover_references(conn, "app.blob")
    first = mark_in_columns(conn, bound_app_blob(""), refs, range_size=7)
    second = mark_in_columns(conn, bound_app_blob(""), refs, range_size=7)
    assert first.became_unused == 30 and first.ranges > 1
    assert (second.became_unused, second.became_used) == (0, 0)


def test_a_referencing_table_created_later_protects_its_blobs(conn, s3, bucket):
    covered, loose = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("CREATE SCHEMA IF NOT EXISTS catalog_test")
        conn.execute("DROP TABLE IF EXISTS catalog_test.album_cover")
        conn.execute("CREATE TABLE catalog_test.album_cover (album text PRIMARY KEY, "
                     "cover_blob text REFERENCES app.blob ON DELETE RESTRICT)")
        conn.execute("INSERT INTO catalog_test.album_cover VALUES ('a1', %s)", (covered,))
    try:
        refs = discover_references(conn, "app.blob")
        assert "catalog_test.album_cover.cover_blob" in refs.describe()
        mark_in_columns(conn, bound_app_blob(""), refs)
        after = flags(conn)
        assert after[covered][0] is False
        assert after[loose][0] is True
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA catalog_test CASCADE")


def test_declared_extra_sql_reference_protects_its_blob(conn, s3, bucket):
    kept, loose = make_blobs(conn, s3, bucket, 2)
    refs = discover_references(conn, "app.blob", extra_sql=[f"SELECT '{kept}'::text"])
    mark_in_columns(conn, bound_app_blob(""), refs)
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
    result = mark_in_columns(conn, bound_app_blob(""), discover_references(conn, "app.blob"))

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
    result = mark_in_columns(conn, bound_app_blob(""), discover_references(conn, "app.blob"), dry_run=True)
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


def test_null_reference_in_a_nullable_foreign_key_hides_no_unused_blob(conn, s3, bucket):
    """Finding 1 (NULL reference): a NULL in a nullable referencing column references nothing; the others are marked."""
    used, loose = make_blobs(conn, s3, bucket, 2)
    with scratch_schema(conn, "CREATE TABLE refs_test.banner (id int PRIMARY KEY, image text NULL REFERENCES app.blob)",
                        f"INSERT INTO refs_test.banner VALUES (1, '{used}'), (2, NULL)"):
        result = mark_in_columns(conn, bound_app_blob(""), discover_references(conn, "app.blob"))
        after = flags(conn)
        assert result.became_unused == 1
        assert after[loose][0] is True and after[used][0] is False


def test_null_reference_returned_by_an_extra_query_is_ignored(conn, s3, bucket):
    """Finding 1 (NULL reference): an extra reference query yielding NULL neither fails the mark nor hides blobs."""
    kept, loose = make_blobs(conn, s3, bucket, 2)
    refs = discover_references(conn, "app.blob", extra_sql=[f"SELECT '{kept}'::text UNION ALL SELECT NULL::text"])
    result = mark_in_columns(conn, bound_app_blob(""), refs)
    after = flags(conn)
    assert result.became_unused == 1
    assert after[loose][0] is True and after[kept][0] is False


def test_foreign_key_to_a_unique_column_other_than_the_primary_key_is_followed(conn, s3, bucket):
    """Finding 4 (confkey): a key referencing app.blob's unique `filename`, not its id, protects the blob."""
    covered, loose = make_blobs(conn, s3, bucket, 2)
    with scratch_schema(conn, "CREATE UNIQUE INDEX refs_test_blob_filename ON app.blob (filename)",
                        "CREATE TABLE refs_test.by_name (name text REFERENCES app.blob (filename))",
                        f"INSERT INTO refs_test.by_name VALUES ('{covered}.bin')"):
        refs = discover_references(conn, "app.blob")
        mark_in_columns(conn, bound_app_blob(""), refs)
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
        refs = discover_references(conn, "app.blob")
        mark_in_columns(conn, bound_app_blob(""), refs)
        after = flags(conn)
        # a key with a NULL column (MATCH SIMPLE) references nothing
        assert after[covered][0] is False and after[other_type][0] is True and after[loose][0] is True
        (ref,) = [r for r in refs.foreign_keys if r.schema == "refs_test"]
        assert (ref.columns, ref.target_columns) == (("blob_id", "mime"), ("id", "mimetype"))
