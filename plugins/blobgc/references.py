"""Find every reference to a blob table by itself: foreign keys from the catalog, plus declared extras.

A table created after installation that has a foreign key to `app.blob` protects its blobs with no
configuration. References that are not foreign keys can be declared as SQL that selects blob ids
(Variable `blobgc_extra_blob_references`, a JSON list of SELECT statements with one column).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import psycopg
from psycopg import sql

from blobgc import queries

log = logging.getLogger(__name__)

BLOB_TABLE = "app.blob"


@dataclass(frozen=True)
class Reference:
    """A column that holds blob ids: a foreign key found in the catalog."""

    schema: str
    table: str
    column: str
    constraint: str
    indexed: bool

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}.{self.column}"


@dataclass(frozen=True)
class ReferenceSet:
    """All references to the blob table: discovered foreign keys and declared extra SQL."""

    foreign_keys: tuple[Reference, ...]
    extra_sql: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        return [r.name for r in self.foreign_keys] + [f"extra[{i}]" for i in range(len(self.extra_sql))]


def discover_references(
    conn: psycopg.Connection, target: str = BLOB_TABLE, extra_sql: Sequence[str] = ()
) -> ReferenceSet:
    """Read the catalog for every foreign key to `target`; warn about unindexed ones."""
    rows = conn.execute(queries.load("references/select_foreign_keys_to_table"), {"target": target}).fetchall()
    refs = tuple(Reference(*row) for row in rows)
    for ref in refs:
        if not ref.indexed:
            log.warning("foreign key %s (%s) has no index on its column: reference checks will scan the table",
                        ref.name, ref.constraint)
    cleaned = tuple(s.strip().rstrip(";") for s in extra_sql if s and s.strip())
    found = ReferenceSet(refs, cleaned)
    log.info("references to %s: %s", target, ", ".join(found.describe()) or "none")
    return found



def referenced_ids_query(refs: ReferenceSet, scope: Literal["range", "ids"]) -> sql.Composable:
    """A SELECT of blob ids referenced anywhere, limited to a key range or to a list of ids.

    scope "range" binds %(lo)s (inclusive) and %(hi)s (exclusive), either NULL for open; scope "ids"
    binds %(ids)s, a text array.
    """

    def condition(column: sql.Composable) -> sql.Composable:
        if scope == "range":
            return sql.SQL("(%(lo)s::text IS NULL OR {c} >= %(lo)s) AND (%(hi)s::text IS NULL OR {c} < %(hi)s)").format(
                c=column
            )
        return sql.SQL("{c} = ANY(%(ids)b::text[])").format(c=column)

    parts: list[sql.Composable] = []
    for ref in refs.foreign_keys:
        col = sql.Identifier(ref.column)
        parts.append(
            sql.SQL("SELECT {col}::text AS blob_id FROM {table} WHERE {cond}").format(
                col=col, table=sql.Identifier(ref.schema, ref.table), cond=condition(col)
            )
        )
    for i, text in enumerate(refs.extra_sql):
        alias = sql.Identifier(f"extra_{i}")
        parts.append(
            sql.SQL("SELECT {a}.blob_id::text FROM ({q}) AS {a}(blob_id) WHERE {cond}").format(
                a=alias,
                q=sql.SQL(text.replace("%", "%%")),
                cond=condition(sql.SQL("{a}.blob_id").format(a=alias)),
            )
        )
    if not parts:
        return sql.SQL("SELECT NULL::text AS blob_id WHERE false")
    return sql.SQL(" UNION ALL ").join(parts)
