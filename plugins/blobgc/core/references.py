"""Find every reference to a blob table by itself: foreign keys from the catalog, plus declared extras.

A table created after installation that has a foreign key to a collection's table protects its blobs with no
configuration, whatever the key's shape: to the primary key or to any unique column, one column or
several, and whatever its ON DELETE action. References that are not foreign keys can be declared as
SQL that selects blob ids (Variable `blobgc_extra_blob_references`, a JSON list of SELECT statements
with one column). A NULL reference references nothing.

Every reference is tested NULL-safely: a referencing column is matched by equality inside EXISTS /
NOT EXISTS (or a join), never by `x IN (subquery)`, whose answer is unknown as soon as the subquery
yields a NULL. Extra queries are checked before anything is written: one that fails, or returns
anything but one column of the blob id's type, fails the discovery naming the query.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import psycopg
from psycopg import sql

from blobgc.core import queries
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

BLOB_ID_COLUMN = "id"


class UnfollowableReference(ConfigurationError):
    """A reference blobgc cannot follow safely: the mark and the sweep stop before writing anything."""


@dataclass(frozen=True)
class Reference:
    """A foreign key to the blob table: its referencing columns and the blob table's columns they match."""

    schema: str
    table: str
    columns: tuple[str, ...]
    constraint: str
    indexed: bool
    target_columns: tuple[str, ...] = (BLOB_ID_COLUMN,)
    on_delete: str = "restrict"

    @property
    def name(self) -> str:
        if len(self.columns) == 1:
            return f"{self.schema}.{self.table}.{self.columns[0]}"
        return f"{self.schema}.{self.table}({', '.join(self.columns)})"

    def direct(self, id_column: str) -> bool:
        """True when the key is one column holding the blob's id itself."""
        return self.target_columns == (id_column,)


@dataclass(frozen=True)
class ReferenceSet:
    """All references to the blob table: discovered foreign keys and declared extra SQL."""

    foreign_keys: tuple[Reference, ...]
    extra_sql: tuple[str, ...] = ()
    table: str = ""  # the collection's table (empty in a set built by hand, which is never checked)
    id_column: str = BLOB_ID_COLUMN
    id_type: str = "text"
    # the oids of the foreign keys found, to notice one added since (None: a set built by hand, never checked)
    fingerprint: tuple[int, ...] | None = None

    def describe(self) -> list[str]:
        return [r.name for r in self.foreign_keys] + [f"extra[{i}]" for i in range(len(self.extra_sql))]

    @property
    def table_identifier(self) -> sql.Identifier:
        return sql.Identifier(*self.table.split(".", 1))


def discover_references(
    conn: psycopg.Connection,
    target: str,
    extra_sql: Sequence[str] = (),
    id_column: str = BLOB_ID_COLUMN,
) -> ReferenceSet:
    """Read the catalog for every foreign key to `target`, check the extra queries, warn about unindexed keys.

    Raises UnfollowableReference, naming the constraint or the query, for a reference blobgc cannot follow:
    a referencing table it may not read, a key whose columns do not pair up, an extra query that
    fails or returns something other than one column of blob ids.
    """
    id_type, id_category = conn.execute(
        queries.load("references/select_id_type"), {"target": target, "column": id_column}
    ).fetchone() or (None, None)
    if id_type is None:
        raise UnfollowableReference(f"{target} has no column {id_column!r}")
    refs: list[Reference] = []
    oids: list[int] = []
    for oid, schema, table, columns, targets, constraint, indexed, readable, on_delete in conn.execute(
        queries.load("references/select_foreign_keys_to_table"), {"target": target}
    ).fetchall():
        oids.append(oid)
        if not readable:
            raise UnfollowableReference(
                f"cannot follow foreign key {constraint} on {schema}.{table}: this role may not "
                f"SELECT from {schema}.{table}, so its references to {target} cannot be checked; "
                "grant SELECT on it"
            )
        if not columns or len(columns) != len(targets) or None in columns or None in targets:
            raise UnfollowableReference(
                f"cannot follow foreign key {constraint} on {schema}.{table}: its columns "
                f"{columns} do not pair up with {target}'s {targets}"
            )
        ref = Reference(schema, table, tuple(columns), constraint, indexed, tuple(targets), on_delete)
        if not indexed:
            log.warning(
                "foreign key %s (%s) has no index on its columns: reference checks will scan the table",
                ref.name,
                ref.constraint,
            )
        refs.append(ref)
    cleaned = tuple(s.strip().rstrip(";").strip() for s in extra_sql if s and s.strip())
    for i, text in enumerate(cleaned):
        check_extra_query(conn, i, text, id_type, id_category)
    found = ReferenceSet(tuple(refs), cleaned, target, id_column, id_type, tuple(sorted(oids)))
    log.info("references to %s: %s", target, ", ".join(found.describe()) or "none")
    return found


class ReferencesChanged(RuntimeError):
    """A foreign key to the blob table was added or dropped since the references were discovered."""


def check_unchanged(conn: psycopg.Connection, refs: ReferenceSet) -> None:
    """Raise ReferencesChanged if the blob table's foreign keys are not those `refs` was built from.

    Call after the DELETE in the deleting transaction: adding a foreign key to the table needs a lock
    that conflicts with the DELETE's, so a key added before the DELETE is seen here, and one added
    after waits for the commit.
    """
    if refs.fingerprint is None:
        return
    now = tuple(
        queries.one_row(conn.execute(queries.load("references/select_foreign_key_oids"), {"target": refs.table}))[0]
        or ()
    )
    if now != refs.fingerprint:
        raise ReferencesChanged(f"the foreign keys to {refs.table} changed while the sweep ran")


def check_extra_query(conn: psycopg.Connection, index: int, text: str, id_type: str, id_category: str) -> None:
    """Run an extra reference query with LIMIT 0 in a read-only transaction: it must return one column of blob ids."""
    shown = text if len(text) <= 200 else text[:197] + "..."
    probe = sql.SQL("SELECT * FROM ({q}) AS extra LIMIT 0").format(q=sql.SQL(text.replace("%", "%%")))
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("SET TRANSACTION READ ONLY")
            cursor = conn.execute(probe)
            columns = cursor.description or []
            types = [
                queries.one_row(conn.execute(queries.load("references/select_type_category"), {"oid": c.type_code}))
                for c in columns
            ]
    except psycopg.Error as error:
        raise UnfollowableReference(
            f"extra reference query [{index}] fails: {shown!r}: {type(error).__name__}: {str(error).strip()}"
        ) from error
    if len(columns) != 1:
        raise UnfollowableReference(
            f"extra reference query [{index}] returns {len(columns)} columns; it must return one "
            f"column of blob ids: {shown!r}"
        )
    got_type, got_category = types[0]
    if got_type != id_type and got_category != id_category:
        raise UnfollowableReference(
            f"extra reference query [{index}] returns a column of type {got_type}, but blob ids "
            f"are {id_type}: {shown!r}"
        )


def reference_match(ref: Reference, ref_alias: sql.Identifier, blob_alias: sql.Identifier) -> sql.Composable:
    """`r.c1 = b.t1 AND r.c2 = b.t2 ...`: a referencing row matches a blob row (never true on a NULL)."""
    return sql.SQL(" AND ").join(
        sql.SQL("{r}.{c} = {b}.{t}").format(r=ref_alias, c=sql.Identifier(c), b=blob_alias, t=sql.Identifier(t))
        for c, t in zip(ref.columns, ref.target_columns, strict=True)
    )


def referenced_ids_query(refs: ReferenceSet, scope: Literal["range", "ids", "unseen"]) -> sql.Composable:
    """A SELECT of the ids of referenced blobs, limited to a key range or to a list of ids; it never yields NULL.

    scope "range" binds %(lo)s (inclusive) and %(hi)s (exclusive), either NULL for open; scope "ids"
    binds %(ids)s, an array of ids; scope "unseen" looks up by id the rows of CTE `unseen` (the rows of a range a
    read replica found unreferenced: replica/referenced_ids_rechecked, `blobgc.collectors.mark`). A key to
    the blob id itself is read from the referencing table alone; a key to another unique column (or several
    columns) is joined to the blob table.
    """
    id_type = sql.SQL(refs.id_type)

    def condition(column: sql.Composable) -> sql.Composable:
        if scope == "range":
            return sql.SQL(
                "{c} IS NOT NULL AND (%(lo)s::{t} IS NULL OR {c} >= %(lo)s::{t}) "
                "AND (%(hi)s::{t} IS NULL OR {c} < %(hi)s::{t})"
            ).format(c=column, t=id_type)
        if scope == "unseen":
            return sql.SQL(queries.load("replica/unseen_ids_condition")).format(c=column, t=id_type)
        return sql.SQL("{c} = ANY(%(ids)b::{t}[])").format(c=column, t=id_type)

    r, b = sql.Identifier("r"), sql.Identifier("b")
    parts: list[sql.Composable] = []
    for ref in refs.foreign_keys:
        table = sql.Identifier(ref.schema, ref.table)
        if ref.direct(refs.id_column):
            col = sql.SQL("{r}.{c}").format(r=r, c=sql.Identifier(ref.columns[0]))
            parts.append(
                sql.SQL("SELECT {col} AS blob_id FROM {table} AS {r} WHERE {cond}").format(
                    col=col, table=table, r=r, cond=condition(col)
                )
            )
        else:
            col = sql.SQL("{b}.{c}").format(b=b, c=sql.Identifier(refs.id_column))
            parts.append(
                sql.SQL(
                    "SELECT {col} AS blob_id FROM {blobs} AS {b} WHERE {cond} AND EXISTS "
                    "(SELECT 1 FROM {table} AS {r} WHERE {match})"
                ).format(
                    col=col,
                    blobs=refs.table_identifier,
                    b=b,
                    cond=condition(col),
                    table=table,
                    r=r,
                    match=reference_match(ref, r, b),
                )
            )
    for i, text in enumerate(refs.extra_sql):
        alias = sql.Identifier(f"extra_{i}")
        col = sql.SQL("{a}.blob_id::{t}").format(a=alias, t=id_type)
        parts.append(
            sql.SQL("SELECT {col} FROM ({q}) AS {a}(blob_id) WHERE {cond}").format(
                col=col, q=sql.SQL(text.replace("%", "%%")), a=alias, cond=condition(col)
            )
        )
    if not parts:
        return sql.SQL("SELECT NULL::{t} AS blob_id WHERE false").format(t=id_type)
    return sql.SQL(" UNION ALL ").join(parts)


def unreferenced_condition(refs: ReferenceSet, blob_alias: str = "b") -> sql.Composable:
    """`NOT EXISTS (...) AND NOT EXISTS (...)`: no reference of any kind points at the blob row `blob_alias`.

    Used inside the sweep's DELETE, so the statement that removes a row re-checks every reference itself,
    whatever the foreign key's ON DELETE action (CASCADE and SET NULL would not stop it).
    """
    b = sql.Identifier(blob_alias)
    checks: list[sql.Composable] = []
    for n, ref in enumerate(refs.foreign_keys):
        r = sql.Identifier(f"ref_{n}")
        checks.append(
            sql.SQL("NOT EXISTS (SELECT 1 FROM {table} AS {r} WHERE {match})").format(
                table=sql.Identifier(ref.schema, ref.table), r=r, match=reference_match(ref, r, b)
            )
        )
    for i, text in enumerate(refs.extra_sql):
        alias = sql.Identifier(f"extra_{i}")
        checks.append(
            sql.SQL("NOT EXISTS (SELECT 1 FROM ({q}) AS {a}(blob_id) WHERE {a}.blob_id::{t} = {b}.{id})").format(
                q=sql.SQL(text.replace("%", "%%")),
                a=alias,
                t=sql.SQL(refs.id_type),
                b=b,
                id=sql.Identifier(refs.id_column),
            )
        )
    return sql.SQL(" AND ").join(checks) if checks else sql.SQL("true")
