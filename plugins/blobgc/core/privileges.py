"""The privileges a DAG (or the migration runner) needs, checked before it does anything, each missing one named
with the GRANT that gives it.

A role without a privilege it needs fails deep inside a task with a bare `permission denied`, after other work,
and a retry fails the same way. The first task of every DAG asks instead, in one round trip
(`has_database_privilege`, `has_schema_privilege`, `has_table_privilege`, `has_sequence_privilege`, by oid, so no
USAGE is needed to ask), for every privilege the run will use on every object it will touch, and raises
MissingPrivileges (a ConfigurationError: no retries) naming each one that is missing, why it is needed, and
the exact `GRANT` statements. A dry run needs what the real run needs: it checks the same list, so a dry run
that passes proves the real run may run.

What each DAG touches, worked out from its collectors and their SQL:

- every DAG: USAGE on schema blobgc, SELECT, INSERT, UPDATE and DELETE on its tables, SELECT on its views,
  USAGE on its sequences (its runs, plans, deletion log and outbox);
- the collection DAGs (`collection_needs`), for each collection the run selects: USAGE on its table's schema;
  on the table SELECT (mark, reconcile), SELECT, UPDATE and DELETE (the sweep claims rows with
  `FOR UPDATE` and deletes them; for app_blob it also clears `unused`), SELECT and INSERT (restore), and UPDATE
  for app_blob's mark (its own `unused`, `updated_at` and `visibility` columns); SELECT on every table with a
  foreign key to it and every relation its `references` queries read, with USAGE on their schemas (mark,
  sweep, reconcile, and restore when Param `collections` makes it check them); CREATE on schema blobgc for
  the first real mark of a collection, which creates `blobgc.mark_<name>`; app_blob's mark also removes
  stale page usages (the column mode's `mark_tables`: UPDATE for `FOR UPDATE`, DELETE); reconcile reads the
  tables of the installed kinds' layouts, where they exist, with the privileges their kinds declare;
- the kinds' DAGs: the tables and sequences their kind declares (`blobgc.core.registry.DagNeeds`);
- `python -m blobgc.migrate` (`migrate_needs`): CREATE on the database while schema blobgc does not exist
  (`CREATE SCHEMA`); once it exists (made by a DBA, say), USAGE and CREATE on it, and SELECT and INSERT on
  its bookkeeping table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psycopg

from blobgc.core import queries, registry
from blobgc.core.collections import Collection
from blobgc.core.registry import ALL_DML
from blobgc.core.settings import ConfigurationError

BLOBGC_SCHEMA = "blobgc"
# The order privileges are named in a GRANT, whatever order they were found missing in.
PRIVILEGE_ORDER = ("USAGE", "CREATE", "CONNECT", "TEMPORARY", "SELECT", "INSERT", "UPDATE", "DELETE")

# dag_id -> the privileges it needs on each collection's table, and why (docs/reference.md §6's four DAGs)
COLLECTION_TABLE: dict[str, tuple[tuple[str, str], ...]] = {
    "blobgc_mark": (("SELECT", "blobgc_mark reads the rows of collection {name!r}"),),
    "blobgc_sweep": (
        ("SELECT", "blobgc_sweep plans from the rows of collection {name!r}"),
        ("UPDATE", "the real blobgc_sweep claims the rows of collection {name!r} with SELECT … FOR UPDATE SKIP LOCKED"),
        ("DELETE", "the real blobgc_sweep deletes the rows of collection {name!r}"),
    ),
    "blobgc_reconcile": (("SELECT", "blobgc_reconcile asks the rows of collection {name!r} which keys they form"),),
    "blobgc_restore": (
        ("SELECT", "blobgc_restore checks the rows of collection {name!r}"),
        ("INSERT", "blobgc_restore puts the logged rows of collection {name!r} back"),
    ),
}
# the collection DAGs that check every reference (restore only when Param `collections` names collections)
CHECKS_REFERENCES = ("blobgc_mark", "blobgc_sweep", "blobgc_reconcile")

# A relation a `references` query may read: a schema-qualified name anywhere, or a bare one after FROM or JOIN.
NAME = r'"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*'
QUALIFIED = re.compile(rf"(?<![\w$.\"])({NAME})\s*\.\s*({NAME})(?![\w$\"(]|\s*[.(])")
AFTER_FROM = re.compile(rf"\b(?:FROM|JOIN)\s+(?:ONLY\s+)?({NAME})(?![\w$\"]|\s*[.(])", re.IGNORECASE)
NOT_RELATIONS = {"lateral", "only", "select", "unnest", "values", "rows"}


@dataclass(frozen=True)
class Need:
    """One privilege on one object, and why the run needs it. `kind` is database, schema, table or sequence;
    `schema` is empty for a database or schema."""

    kind: str
    schema: str
    name: str
    privilege: str
    why: str


def on_table(qualified: str, privileges: Iterable[str], why: str, *, kind: str = "table") -> list[Need]:
    """The needs of `privileges` on table `schema.name`, and USAGE on its schema."""
    schema, name = qualified.split(".", 1)
    return on_relation(schema, name, privileges, why, kind=kind)


def on_relation(schema: str, name: str, privileges: Iterable[str], why: str, *, kind: str = "table") -> list[Need]:
    return [
        Need("schema", "", schema, "USAGE", f"to reach {schema}.{name}"),
        *(Need(kind, schema, name, p, why) for p in privileges),
    ]


@dataclass(frozen=True)
class Missing:
    """The privileges the role lacks on one object, each with why the run needs it."""

    kind: str
    shown: str  # the object's name as a GRANT writes it (quoted where it must be)
    privileges: tuple[str, ...]
    whys: tuple[str, ...]  # one per privilege, in the same order

    def describe(self) -> list[str]:
        return [
            f"{privilege} on {self.kind} {self.shown}: {why}"
            for privilege, why in zip(self.privileges, self.whys, strict=True)
        ]


def grant_statements(missing: Sequence[Missing], role: str) -> list[str]:
    """The GRANTs that give `role` every missing privilege: one per kind and set of privileges, naming its objects."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for m in missing:
        grouped.setdefault((m.kind, m.privileges), []).append(m.shown)
    statements = []
    for (kind, privileges), objects in grouped.items():
        on = {"database": "DATABASE ", "schema": "SCHEMA ", "sequence": "SEQUENCE "}.get(kind, "")
        statements.append(f"GRANT {', '.join(privileges)} ON {on}{', '.join(objects)} TO {role};")
    return statements


class MissingPrivileges(ConfigurationError):
    """The role lacks privileges a run needs: it names each one, why, and the GRANTs that give them."""

    def __init__(self, what: str, missing: list[Missing], role: str, *, note: str = "") -> None:
        self.missing = missing
        self.role = role
        self.grants = grant_statements(missing, role)
        count = sum(len(m.privileges) for m in missing)
        lines = [
            f"{what} cannot run as role {role}: it lacks {count} privilege{'' if count == 1 else 's'} it needs{note}:",
            *(f"  - {line}" for m in missing for line in m.describe()),
            "Grant them (as the owner of each object, or a superuser), then run it again:",
            *(f"  {g}" for g in self.grants),
        ]
        super().__init__("\n".join(lines))


def missing_privileges(conn: psycopg.Connection, needs: Iterable[Need]) -> tuple[list[Missing], str]:
    """(what the role lacks of `needs`, one entry per object, in the order first needed; the role's name), in one
    round trip. A need on an object that does not exist is left out: the checks of tables and migrations name it."""
    wanted = list(dict.fromkeys(needs))
    if not wanted:
        return [], queries.one_row(conn.execute("SELECT quote_ident(current_user)"))[0]
    rows = conn.execute(
        queries.load("privileges/select_missing_privileges"),
        {
            "kinds": [n.kind for n in wanted],
            "schemas": [n.schema for n in wanted],
            "names": [n.name for n in wanted],
            "privileges": [n.privilege for n in wanted],
        },
    ).fetchall()
    role = rows[0][3]
    lacking: dict[tuple[str, str], dict[str, list[str]]] = {}
    for (_i, held, shown, _role), need in zip(rows, wanted, strict=True):
        if held is False:
            whys = lacking.setdefault((need.kind, shown), {}).setdefault(need.privilege, [])
            if need.why not in whys:
                whys.append(need.why)
    missing = []
    for (kind, shown), by_privilege in lacking.items():
        privileges = tuple(sorted(by_privilege, key=PRIVILEGE_ORDER.index))
        missing.append(Missing(kind, shown, privileges, tuple("; ".join(by_privilege[p]) for p in privileges)))
    return missing, role


def check_privileges(conn: psycopg.Connection, what: str, needs: Iterable[Need], *, note: str = "") -> None:
    """Raise MissingPrivileges, naming each missing privilege and its GRANT, unless the role holds every one of
    `needs` (on the objects that exist)."""
    missing, role = missing_privileges(conn, needs)
    if missing:
        raise MissingPrivileges(what, missing, role, note=note)


# ------------------------------------------------------------------------------------------- what runs need
def blobgc_schema_needs(conn: psycopg.Connection, what: str) -> list[Need]:
    """USAGE on schema blobgc, and every privilege blobgc's runs use on its own tables, views and sequences."""
    needs = [Need("schema", "", BLOBGC_SCHEMA, "USAGE", f"{what} keeps its runs, plans and outbox in it")]
    for name, kind in conn.execute(queries.load("privileges/select_schema_relations"), {"schema": BLOBGC_SCHEMA}):
        privileges = {"table": ALL_DML, "view": ("SELECT",), "sequence": ("USAGE",)}[kind]
        table_kind = "sequence" if kind == "sequence" else "table"
        needs += [
            Need(table_kind, BLOBGC_SCHEMA, name, p, f"{what} reads and writes blobgc's own {kind}s")
            for p in privileges
        ]
    return needs


def seed_needs(dag_id: str) -> list[Need]:
    """What a kind's DAG uses on its application's tables and sequences (its kind's `DagNeeds`)."""
    needs: list[Need] = []
    declared = registry.dag_needs(dag_id)
    if declared is None:
        return needs
    for table, privileges in declared.tables.items():
        needs += on_table(table, privileges, f"{dag_id} collects from {table}")
    for sequence in declared.sequences:
        needs += on_table(sequence, ("USAGE",), f"{dag_id} inserts rows that draw ids from it", kind="sequence")
    return needs


def collection_needs(
    conn: psycopg.Connection,
    dag_id: str,
    collections: Sequence[Collection],
    *,
    extra_references: Mapping[str, Sequence[str]] | None = None,
    check_references: bool = True,
    seeds: bool = True,
) -> list[Need]:
    """What `dag_id` (one of COLLECTION_TABLE's) uses on the selected `collections`' tables and everything that
    references them (`extra_references`: name -> further reference queries, as app_blob's Variable), found in the
    catalog by name; `check_references` False for a restore that binds its collections only; `seeds` for a
    reconcile that also covers the seed layouts."""
    needs: list[Need] = []
    for c in collections:
        for privilege, why in COLLECTION_TABLE[dag_id]:
            needs += on_table(c.table, [privilege], why.format(name=c.name))
        if (mode := c.mode) is not None and dag_id == "blobgc_mark":
            needs += on_table(c.table, ["UPDATE"], f"blobgc_mark keeps {c.name}'s mark in its own columns")
            for table, privileges in mode.mark_tables.items():
                needs += on_table(
                    table,
                    ["SELECT", *privileges],
                    f"blobgc_mark also writes {table} for {c.name} first (stale page usages: DELETE … FOR UPDATE)",
                )
    if dag_id == "blobgc_mark":
        marked = {
            name
            for name, _kind in conn.execute(
                queries.load("privileges/select_schema_relations"), {"schema": BLOBGC_SCHEMA}
            )
        }
        for c in collections:
            if not c.column_mode and f"mark_{c.name}" not in marked:
                needs.append(
                    Need(
                        "schema",
                        "",
                        BLOBGC_SCHEMA,
                        "CREATE",
                        f"the first real blobgc_mark of collection {c.name!r} creates {BLOBGC_SCHEMA}.mark_{c.name}",
                    )
                )
    if dag_id in CHECKS_REFERENCES or check_references:
        needs += reference_needs(conn, collections, extra_references or {})
    if dag_id == "blobgc_reconcile" and seeds:
        reconciled = registry.reconciled_tables()
        qualified = [(schema, name) for schema, name in (t.split(".", 1) for t in reconciled)]
        present = {(s, n) for s, n in named_relations(conn, qualified)}
        for table, privileges in reconciled.items():
            if tuple(table.split(".", 1)) in present:
                needs += on_table(
                    table,
                    privileges,
                    f"blobgc_reconcile reconciles the objects of {table} (and its drain's guard checks its rows)",
                )
    return needs


def reference_needs(
    conn: psycopg.Connection, collections: Sequence[Collection], extra_references: Mapping[str, Sequence[str]]
) -> list[Need]:
    """SELECT (and USAGE on the schema) on every table with a foreign key to a collection's table, and on every
    relation a collection's `references` queries read: every reference is checked before anything is written."""
    if not collections:
        return []
    needs: list[Need] = []
    by_table: dict[tuple[str, str], list[str]] = {}
    for c in collections:
        by_table.setdefault((c.schema_name, c.table_name), []).append(c.name)
    targets = list(by_table)
    for schema, name, ref_schema, ref_table, constraint in conn.execute(
        queries.load("privileges/select_referencing_tables"),
        {"schemas": [t[0] for t in targets], "names": [t[1] for t in targets]},
    ):
        for collection in by_table[(schema, name)]:
            needs += on_relation(
                ref_schema,
                ref_table,
                ["SELECT"],
                f"its foreign key {constraint} references "
                f"{schema}.{name} (collection {collection!r}): every reference is checked",
            )
    for c in collections:
        texts = [*c.references, *extra_references.get(c.name, ())]
        for i, text in enumerate(texts):
            label = f"references[{i}]" if i < len(c.references) else "Variable blobgc_extra_blob_references"
            for schema, name in named_relations(conn, relation_names(text)):
                needs += on_relation(schema, name, ["SELECT"], f"{label} of collection {c.name!r} reads it")
    return needs


def relation_names(query: str) -> list[tuple[str | None, str]]:
    """The names in `query` that may be relations it reads: every schema-qualified name, and every bare name after
    FROM or JOIN (None as its schema: the search path's). Names that are no relation are dropped by the catalog."""

    def unquoted(name: str) -> str:
        return name[1:-1].replace('""', '"') if name.startswith('"') else name.lower()

    found: list[tuple[str | None, str]] = [(unquoted(s), unquoted(n)) for s, n in QUALIFIED.findall(query)]
    found += [(None, unquoted(n)) for n in AFTER_FROM.findall(query) if n.lower() not in NOT_RELATIONS]
    return list(dict.fromkeys(found))


def named_relations(conn: psycopg.Connection, names: Sequence[tuple[str | None, str]]) -> list[tuple[str, str]]:
    """The relations `names` ((schema or None, name)) name in this database, as (schema, name)."""
    if not names:
        return []
    rows = conn.execute(
        queries.load("privileges/select_named_relations"),
        {"schemas": [s for s, _ in names], "names": [n for _, n in names]},
    ).fetchall()
    return list(dict.fromkeys((schema, name) for _i, schema, name in rows))


def dag_needs(
    conn: psycopg.Connection,
    dag_id: str,
    *,
    collections: Sequence[Collection] = (),
    extra_references: Mapping[str, Sequence[str]] | None = None,
    check_references: bool = True,
    seeds: bool = True,
) -> list[Need]:
    """Everything `dag_id`'s run uses: blobgc's own schema, and its seed tables or its selected collections."""
    needs = blobgc_schema_needs(conn, dag_id)
    if dag_id in COLLECTION_TABLE:
        needs += collection_needs(
            conn, dag_id, collections, extra_references=extra_references, check_references=check_references, seeds=seeds
        )
    needs += seed_needs(dag_id)
    return needs


def migrate_needs(
    conn: psycopg.Connection,
    schema: str = BLOBGC_SCHEMA,
    table: str = "schema_migration",
    what: str = "python -m blobgc.migrate",
) -> list[Need]:
    """What the migration runner needs: CREATE on the database while `schema` does not exist (it creates it);
    once it exists, USAGE and CREATE on it (its migrations create tables there) and SELECT and INSERT on its
    bookkeeping table."""
    if not queries.one_row(conn.execute(queries.load("privileges/select_schema_exists"), {"schema": schema}))[0]:
        return [Need("database", "", conn.info.dbname, "CREATE", f"{what} creates schema {schema}")]
    return [
        Need("schema", "", schema, "USAGE", f"{what} creates and alters its tables"),
        Need("schema", "", schema, "CREATE", f"{what} creates its tables"),
        *(Need("table", schema, table, p, f"{what} records there what it applied") for p in ("SELECT", "INSERT")),
    ]


def check_migrate_privileges(
    conn: psycopg.Connection,
    schema: str = BLOBGC_SCHEMA,
    table: str = "schema_migration",
    what: str = "python -m blobgc.migrate",
) -> None:
    """Raise MissingPrivileges, naming each GRANT, unless the role may run the migrations into `schema`."""
    check_privileges(conn, what, migrate_needs(conn, schema, table, what))
