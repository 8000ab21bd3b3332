"""What the database's catalog says about tables blobgc reads or keeps: the one place that asks whether they exist."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from blobgc.core import queries


def missing_tables(conn: psycopg.Connection, names: Iterable[str]) -> list[str]:
    """The tables among `names` (schema-qualified) that the database does not have, in the order given (by name:
    one in a schema this role may not use is there, and asking needs no privilege)."""
    return [row[0] for row in conn.execute(queries.load("catalog/select_missing_tables"), {"names": list(names)})]


def table_exists(conn: psycopg.Connection, name: str) -> bool:
    return not missing_tables(conn, [name])
