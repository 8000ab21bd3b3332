"""blobgc.core.catalog: whether tables exist, the one probe every layer asks."""
from __future__ import annotations

from blobgc.core.catalog import missing_tables, table_exists


def test_missing_tables_names_only_the_absent_ones_in_order(conn):
    assert missing_tables(conn, ["app.paste", "nope.gone", "app.content", "nope.too"]) == ["nope.gone", "nope.too"]


def test_table_exists_says_whether_one_table_is_there(conn):
    assert table_exists(conn, "blobgc.schema_migration")
    assert not table_exists(conn, "blobgc.no_such_table")
