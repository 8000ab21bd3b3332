"""blobgc.core.references: discovery of every reference to a blob (foreign keys and declared queries), and the SQL
that reads them."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from blobgc.core.references import (
    Reference, ReferenceSet, UnfollowableReference, discover_references, referenced_ids_query,
)
from tests.helpers import make_blobs
from tests.support.references import flags, scratch_schema


def render(composable) -> str:
    return composable.as_string(None)


def test_foreign_keys_are_quoted_identifiers():
    refs = ReferenceSet((Reference("app", 'odd"name', "blob_id", "fk", True),))
    text = render(referenced_ids_query(refs, "ids"))
    assert '"app"."odd""name"' in text
    assert "= ANY(%(ids)b::text[])" in text


def test_range_scope_binds_bounds():
    refs = ReferenceSet((Reference("app", "t", "c", "fk", True),))
    text = render(referenced_ids_query(refs, "range"))
    assert '"c" >= %(lo)s' in text and "%(hi)s::text IS NULL" in text


def test_extra_sql_percent_signs_are_escaped():
    refs = ReferenceSet((), ("SELECT id FROM app.x WHERE name LIKE 'a%'",))
    text = render(referenced_ids_query(refs, "ids"))
    assert "LIKE 'a%%'" in text


def test_no_references_selects_nothing():
    assert "WHERE false" in render(referenced_ids_query(ReferenceSet(()), "ids"))


def test_discovers_the_contract_foreign_keys(conn):
    refs = discover_references(conn, "app.blob")
    names = {r.name for r in refs.foreign_keys}
    assert {"app.blob_attachment.blob_id", "app.page_using_blob.blob_id"} <= names
    assert all(r.indexed for r in refs.foreign_keys)


@pytest.fixture
def limited_role(conn, test_dsn):
    """A role of the test's own (roles outlive the test database), dropped with its grants afterwards even when
    the test fails."""
    role = sql.Identifier(f"blobgc_limited_{uuid.uuid4().hex[:12]}")
    conn.execute(sql.SQL("CREATE ROLE {}").format(role))
    try:
        yield role
    finally:
        conn.execute("RESET ROLE")  # the test may have failed while acting as the role
        with psycopg.connect(test_dsn, autocommit=True) as admin:  # its grants are in the test database only
            admin.execute(sql.SQL("DROP OWNED BY {}").format(role))
            admin.execute(sql.SQL("DROP ROLE {}").format(role))


def test_foreign_key_blobgc_cannot_follow_fails_the_mark_naming_the_constraint(conn, s3, bucket, limited_role):
    """Finding 4 (unfollowable): a referencing table this role may not read fails discovery, naming the constraint."""
    make_blobs(conn, s3, bucket, 1)
    with scratch_schema(conn, "CREATE TABLE refs_test.secret (blob_id text CONSTRAINT secret_blob_fk "
                              "REFERENCES app.blob)"):
        with conn.transaction():
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA app, refs_test TO {}").format(limited_role))
            conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA app TO {}").format(limited_role))
        conn.execute(sql.SQL("SET ROLE {}").format(limited_role))
        try:
            with pytest.raises(UnfollowableReference, match="secret_blob_fk"):
                discover_references(conn, "app.blob")
        finally:
            conn.execute("RESET ROLE")


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
        discover_references(conn, "app.blob", extra_sql=["SELECT id FROM app.blob", query])
    assert f"extra reference query [1] {problem}" in str(refused.value)
    assert query[:40] in str(refused.value)
    assert flags(conn) == before and set(before) == set(ids)
