"""Apply a folder of NNNN_*.sql migrations in order, once each, remembering what was applied.

`python -m blobgc.migrate` (the one command) applies blobgc's own, blobgc/sql/migrations/ (package data), through
this runner. They create schema blobgc and nothing else, so blobgc can be migrated into any database, live or
not, whatever the application keeps in its own schemas. The demo application's migrations go through the same
runner with a folder, table and lock of their own (the demo's own command).

One session advisory lock is held for the whole run, so two runners never apply one migration twice; waiting
for it is unbounded, as only another migrator holds it (see advisory_lock). Every other lock wait is bounded
by lock_timeout (BLOBGC_MIGRATION_LOCK_TIMEOUT, 10s): on a live database a migration fails with
MigrationLockTimeout instead of queueing behind an application transaction, with every query of the
application queued behind it. A migration runs in one transaction, unless its first line is
`-- blobgc: no transaction` (CREATE INDEX CONCURRENTLY cannot run in one): its statements then run one by one
in autocommit, and it is recorded once they all succeeded, so such a file must be safe to run again after a
failure.

Each applied version is recorded with its file's sha256, and a file edited after it was applied is refused
(MigrationChanged), except for the versions a `legacy` function names (see legacy_versions).

blobgc's numbering starts at 0002_blobgc_schema: 0001_app_schema created the demo application's tables and
moved to plugins/demo_app/migrations/ (LEGACY_VERSIONS). Databases record each migration by its name, so the
files are never renumbered; a run reports what it applied by name (`summary`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TypedDict, Unpack

import psycopg
from psycopg import sql

from blobgc.core import queries
from blobgc.core.catalog import table_exists
from blobgc.core.privileges import check_migrate_privileges
from blobgc.core.queries import sql_root
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

MIGRATION_LOCK = 0x626C6F62  # "blob"
TABLE = "blobgc.schema_migration"
NO_TRANSACTION = "-- blobgc: no transaction"
MIGRATION_NAME = re.compile(r"[0-9]{4}_.*\.sql")
DEFAULT_LOCK_TIMEOUT = "10s"
LOCK_POLL_SECONDS = 0.2

# What blobgc's folder held before the application's tables moved to plugins/demo_app/migrations/.
LEGACY_VERSIONS = frozenset(
    {
        "0001_app_schema",
        "0002_blobgc_schema",
        "0003_paste_expiry",
        "0004_image_crawler",
        "0005_reconcile",
        "0006_generations",
        "0007_audit_restore",
        "0008_safety",
    }
)
LEGACY_MARKER = "0001_app_schema"

# A schema that exists (made by a DBA, say) is not created again: CREATE SCHEMA IF NOT EXISTS needs CREATE on the
# database even then, as PostgreSQL checks the privilege before it looks (see without_existing_schemas).
CREATE_SCHEMA = re.compile(r"^CREATE SCHEMA IF NOT EXISTS ([a-z_][a-z0-9_]*);[ \t]*$", re.MULTILINE | re.IGNORECASE)
BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS {table} (
    version     text PRIMARY KEY,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
"""

Legacy = Callable[[psycopg.Connection, Mapping[str, str]], set[str]]


class MigrationOptions(TypedDict, total=False):
    """apply_migrations's keyword arguments, as main passes them on."""

    folder: Path | None
    table: str
    lock: int
    legacy: Legacy
    lock_timeout: str | None


class MigrationChanged(RuntimeError):
    """An applied migration's file was edited afterwards; add a new migration instead."""


class MigrationLockTimeout(RuntimeError):
    """A migration waited longer than lock_timeout for a lock another session holds; it was not recorded."""


def migrations(folder: Path | Traversable | None = None) -> list[tuple[str, str]]:
    """(version, text) of each NNNN_*.sql in `folder` (blobgc's package data by default), in order."""
    folder = folder or sql_root().joinpath("migrations")
    found = sorted((entry.name, entry) for entry in folder.iterdir() if MIGRATION_NAME.fullmatch(entry.name))
    return [(name[: -len(".sql")], entry.read_text(encoding="utf-8")) for name, entry in found]


def checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def transactional(text: str) -> bool:
    return text.split("\n", 1)[0].strip() != NO_TRANSACTION


def statements(text: str) -> list[str]:
    """A no-transaction migration's statements: split on `;` at the end of a line, comment-only chunks skipped."""
    chunks = (chunk.strip() for chunk in re.split(r";[ \t]*$", text, flags=re.MULTILINE))
    return [
        chunk
        for chunk in chunks
        if any(line.strip() and not line.lstrip().startswith("--") for line in chunk.splitlines())
    ]


def legacy_versions(conn: psycopg.Connection, recorded: Mapping[str, str]) -> set[str]:
    """blobgc's versions that a database migrated before the split recorded with their old, combined contents.

    Until then 0001_app_schema .. 0008_safety created the demo application's tables along with blobgc's. Such
    a database (it records 0001_app_schema, which blobgc's folder no longer holds) keeps those records as they
    are, their checksums unchecked, and goes on from the first version it lacks.
    """
    return set(LEGACY_VERSIONS & recorded.keys()) if LEGACY_MARKER in recorded else set()


def apply_migrations(
    conn: psycopg.Connection,
    folder: Path | None = None,
    table: str = TABLE,
    lock: int = MIGRATION_LOCK,
    legacy: Legacy = legacy_versions,
    lock_timeout: str | None = None,
) -> list[str]:
    """Apply every pending migration of `folder` and return the versions applied now.

    `table` (schema.name, created if missing) records them, under advisory lock `lock`. `legacy(conn, recorded)`
    names versions the database already has from before `table` tracked them as they are now: their checksums
    are not checked, and those `table` lacks are recorded without running. `conn` must not be in a transaction;
    it is in autocommit during the run and given back as it came.
    """
    timeout = lock_timeout or os.environ.get("BLOBGC_MIGRATION_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT)
    autocommit = conn.autocommit
    conn.autocommit = True
    try:
        check_migrate_privileges(conn, *table.split("."))  # before anything runs: a missing grant, named with its GRANT
        with advisory_lock(conn, lock), session_lock_timeout(conn, timeout):
            return apply_pending(conn, migrations(folder), table, legacy, timeout)
    finally:
        conn.autocommit = autocommit


@contextlib.contextmanager
def advisory_lock(conn: psycopg.Connection, key: int) -> Iterator[None]:
    """Session advisory lock `key`, polled for between statements rather than waited for in pg_advisory_lock.

    A session waiting inside a statement holds a snapshot, and the other migrator's CREATE INDEX CONCURRENTLY
    waits for every older snapshot to go: the two would deadlock.
    """
    if not try_advisory_lock(conn, key):
        log.info("waiting for another migrator (advisory lock %s)", key)
        while not try_advisory_lock(conn, key):
            time.sleep(LOCK_POLL_SECONDS)
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def try_advisory_lock(conn: psycopg.Connection, key: int) -> bool:
    (locked,) = queries.one_row(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)))
    return bool(locked)


@contextlib.contextmanager
def session_lock_timeout(conn: psycopg.Connection, timeout: str) -> Iterator[None]:
    """lock_timeout set to `timeout` for the session, and put back as it was afterwards."""
    (previous,) = queries.one_row(conn.execute("SELECT current_setting('lock_timeout')"))
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (timeout,))
    try:
        yield
    finally:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (previous,))


def apply_pending(
    conn: psycopg.Connection, pending: list[tuple[str, str]], table: str, legacy: Legacy, timeout: str
) -> list[str]:
    schema, name = table.split(".")
    table_id = sql.Identifier(schema, name)
    if not schema_exists(conn, schema):
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    conn.execute(sql.SQL(BOOKKEEPING).format(table=table_id))
    recorded: dict[str, str] = dict(
        conn.execute(sql.SQL("SELECT version, checksum FROM {}").format(table_id)).fetchall()
    )
    old = legacy(conn, recorded)
    applied_now: list[str] = []
    for version, text in pending:
        if version in recorded:
            if version not in old and recorded[version] != checksum(text):
                raise MigrationChanged(f"migration {version} changed after it was applied")
        elif version in old:
            record(conn, table_id, version, text)
            log.info("recorded %s %s without running it: the database has it from before", table, version)
        else:
            apply_one(conn, table_id, version, text, timeout)
            applied_now.append(version)
            log.info("applied %s %s", table, version)
    return applied_now


def without_existing_schemas(conn: psycopg.Connection, text: str) -> str:
    """`text` with each `CREATE SCHEMA IF NOT EXISTS s;` line of a schema that exists made a comment: PostgreSQL
    checks CREATE on the database before it looks whether the schema exists, and a role given only USAGE and
    CREATE on a schema a DBA made would fail there. The file's checksum is its own text's, unchanged."""

    def unless_it_exists(found: re.Match[str]) -> str:
        return f"-- schema {found[1]} exists: not created again" if schema_exists(conn, found[1]) else found[0]

    return CREATE_SCHEMA.sub(unless_it_exists, text)


def schema_exists(conn: psycopg.Connection, schema: str) -> bool:
    (exists,) = queries.one_row(conn.execute(queries.load("privileges/select_schema_exists"), {"schema": schema}))
    return bool(exists)


def apply_one(conn: psycopg.Connection, table_id: sql.Identifier, version: str, text: str, timeout: str) -> None:
    run = without_existing_schemas(conn, text)
    try:
        if transactional(text):
            with conn.transaction():
                conn.execute(run)
                record(conn, table_id, version, text)
        else:
            for statement in statements(run):
                conn.execute(statement)
            record(conn, table_id, version, text)
    except psycopg.errors.LockNotAvailable as error:
        raise MigrationLockTimeout(
            f"migration {version} waited more than {timeout} (BLOBGC_MIGRATION_LOCK_TIMEOUT) for a lock another "
            f"session holds, and was not recorded; run the migrations again once that session is done ({error})"
        ) from error


def record(conn: psycopg.Connection, table_id: sql.Identifier, version: str, text: str) -> None:
    conn.execute(
        sql.SQL("INSERT INTO {} (version, checksum) VALUES (%s, %s)").format(table_id), (version, checksum(text))
    )


class SchemaBehind(ConfigurationError):
    """The database's blobgc schema lacks migrations this code needs: a task must not run on it."""


def pending_versions(conn: psycopg.Connection, folder: Path | None = None, table: str = TABLE) -> list[str]:
    """The migrations of `folder` that `table` does not record (every one, when the table does not exist)."""
    if not table_exists(conn, table):
        return [version for version, _ in migrations(folder)]
    recorded = {
        r[0] for r in conn.execute(sql.SQL("SELECT version FROM {}").format(sql.Identifier(*table.split(".", 1))))
    }
    return [version for version, _ in migrations(folder) if version not in recorded]


def check_schema_current(conn: psycopg.Connection) -> None:
    """Raise SchemaBehind, saying what to run, when blobgc's migrations are not all applied to this database."""
    pending = pending_versions(conn)
    if pending:
        raise SchemaBehind(
            f"blobgc's schema in this database is behind the code: {', '.join(pending)} "
            f"{'is' if len(pending) == 1 else 'are'} not applied. Run `python -m blobgc.migrate --conn-id "
            "blobgc_postgres` (the connection naming this database), then clear this task."
        )


def status(conn: psycopg.Connection, folder: Path | None = None, table: str = TABLE) -> str:
    """`--status`: each migration of `folder`, applied or pending."""
    pending = set(pending_versions(conn, folder, table))
    lines = [f"{'pending' if version in pending else 'applied'}  {version}" for version, _ in migrations(folder)]
    return "\n".join([f"{table}: {len(lines) - len(pending)} applied, {len(pending)} pending", *lines])


def span(versions: list[str]) -> str:
    """`versions` named: one, two, or the first and the last of more."""
    return " … ".join([versions[0], versions[-1]]) if len(versions) > 2 else ", ".join(versions)


def summary(table: str, applied: list[str], versions: list[str]) -> str:
    """A run's report: the migrations it applied, by name, and those the database had before, out of `versions`."""
    before = len(versions) - len(applied)
    now = (
        f"{len(applied)} migration{'' if len(applied) == 1 else 's'} applied now ({span(applied)})"
        if applied
        else "no migration to apply"
    )
    latest = f"; the schema is at {versions[-1]}" if versions else ""
    return f"{table}: {now}, {before} of {len(versions)} applied before{latest}"


def main(argv: list[str] | None = None, **options: Unpack[MigrationOptions]) -> int:
    """Migrate the database BLOBGC_PG_DSN names (`--status`: list what is applied and pending instead);
    `options` are apply_migrations's (blobgc's by default)."""
    logging.basicConfig(level=logging.INFO, format="[migrate] %(message)s")
    dsn = os.environ.get("BLOBGC_PG_DSN")
    if not dsn:
        print("BLOBGC_PG_DSN is not set: source .blobgc/env first", file=sys.stderr)
        return 2
    if "--status" in (sys.argv[1:] if argv is None else argv):
        with psycopg.connect(dsn) as conn:
            print(status(conn, options.get("folder"), options.get("table", TABLE)))
        return 0
    try:
        with psycopg.connect(dsn) as conn:
            applied = apply_migrations(conn, **options)
    except ConfigurationError as error:  # a missing grant: named, with its GRANT, not a traceback
        print(f"[migrate] {error}", file=sys.stderr)
        return 2
    versions = [version for version, _ in migrations(options.get("folder"))]
    print(f"[migrate] {summary(options.get('table', TABLE), applied, versions)}")
    return 0
