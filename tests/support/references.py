"""Seed 000's mark test kit: flags of every blob, a scratch schema of referencing tables, range coverage."""
from __future__ import annotations

import contextlib
from datetime import datetime


def flags(conn) -> dict[str, tuple[bool, datetime, str]]:
    return {r[0]: (r[1], r[2], r[3]) for r in conn.execute("SELECT id, unused, updated_at, visibility FROM app.blob")}


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


def covered(conn, ranges) -> int:
    total = 0
    for lo, hi in ranges:
        total += conn.execute("SELECT count(*) FROM app.blob WHERE (%(lo)s::text IS NULL OR id >= %(lo)s) "
                              "AND (%(hi)s::text IS NULL OR id < %(hi)s)", {"lo": lo, "hi": hi}).fetchone()[0]
    return total
