"""blobgc.core.migrations: the migration runner, on blobgc's migrations and on folders of the tests' own.

Most tests migrate empty databases of their own (`new_database`), so they can start from any state: a user's
application tables, a database migrated before the application's tables left blobgc's folder, a session
holding a lock. tests/demo_app/test_migrate.py reuses the helpers.
"""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from blobgc.core.migrations import (LEGACY_VERSIONS, NO_TRANSACTION, MigrationChanged, MigrationLockTimeout,
                                 apply_migrations, migrations)
from blobgc.core.queries import sql_root
from demo_app import migrate as app_migrate

BLOBGC = sql_root() / "migrations"
APP = app_migrate.FOLDER

# The migrations as they were before the split: each old version of blobgc's folder and where its parts went
# (together, the parts hold the old file's statements line for line).
OLD_LAYOUT = {
    "0001_app_schema": [APP / "0001_app_schema.sql"],
    "0002_blobgc_schema": [BLOBGC / "0002_blobgc_schema.sql"],
    "0003_paste_expiry": [BLOBGC / "0003_paste_expiry.sql", APP / "0002_paste_expiry_index.sql"],
    "0004_image_crawler": [APP / "0003_crawl_requests.sql", BLOBGC / "0004_image_crawler.sql"],
    "0005_reconcile": [BLOBGC / "0005_reconcile.sql"],
    "0006_generations": [APP / "0004_mail_blob_sizes.sql", BLOBGC / "0006_generations.sql"],
    "0007_audit_restore": [BLOBGC / "0007_audit_restore.sql"],
    "0008_safety": [BLOBGC / "0008_safety.sql", APP / "0005_image_unbound_stamp.sql"],
}

SCRATCH_TABLE = "scratch.schema_migration"
SCRATCH_LOCK = 0x73637274  # "scrt"


@pytest.fixture
def new_database(stack):
    """Makes empty databases of the test's own on the stack's PostgreSQL (dropped afterwards); returns their DSN."""
    admin = make_conninfo(stack["BLOBGC_PG_DSN"], dbname="postgres")
    names: list[str] = []

    def create() -> str:
        names.append(f"blobgc_scratch_{uuid.uuid4().hex[:12]}")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{names[-1]}"')
        return make_conninfo(stack["BLOBGC_PG_DSN"], dbname=names[-1])

    yield create
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def connect(dsn: str) -> psycopg.Connection:
    """In autocommit, as the runner wants its connection outside a transaction (it gives it back as it came)."""
    return psycopg.connect(dsn, autocommit=True)


def versions(folder: Path | None = None) -> list[str]:
    return [version for version, _ in migrations(folder)]


def recorded(conn, table: str = "blobgc.schema_migration") -> list[str]:
    return [r[0] for r in conn.execute(f"SELECT version FROM {table} ORDER BY version")]


def schema_names(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}


def index_is_valid(conn, name: str) -> bool:
    return conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass", (name,)).fetchone()[0]


def schema_of(conn, *schemas: str) -> dict[str, list[tuple]]:
    """The columns, indexes and triggers of `schemas`, to compare two databases or one before and after."""
    names = list(schemas)
    return {
        "columns": conn.execute(
            "SELECT table_schema, table_name, ordinal_position, column_name, data_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = ANY (%s) ORDER BY 1, 2, 3", (names,)).fetchall(),
        "indexes": conn.execute(
            "SELECT schemaname, indexname, indexdef FROM pg_indexes WHERE schemaname = ANY (%s) ORDER BY 1, 2",
            (names,)).fetchall(),
        "triggers": conn.execute(
            "SELECT event_object_schema, event_object_table, trigger_name, event_manipulation, action_statement"
            " FROM information_schema.triggers WHERE event_object_schema = ANY (%s) ORDER BY 1, 2, 3, 4",
            (names,)).fetchall(),
    }


def migrate_the_old_way(conn, old_versions) -> None:
    """What blobgc's migrations did before the split: app, gen and blobgc tables together, recorded in
    blobgc.schema_migration under the old versions (their checksums are of no use any more)."""
    conn.execute("CREATE SCHEMA blobgc; CREATE TABLE blobgc.schema_migration (version text PRIMARY KEY, "
                 "checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
    for version in sorted(old_versions):
        with conn.transaction():
            for part in OLD_LAYOUT[version]:
                conn.execute(part.read_text())
            conn.execute("INSERT INTO blobgc.schema_migration (version, checksum) VALUES (%s, 'old')", (version,))


def write_migrations(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / f"{name}.sql").write_text(text)
    return folder


def apply_scratch(dsn: str, folder: Path) -> list[str]:
    with connect(dsn) as conn:
        return apply_migrations(conn, folder=folder, table=SCRATCH_TABLE, lock=SCRATCH_LOCK)


def test_migrations_are_idempotent(conn):
    assert apply_migrations(conn) == []
    assert recorded(conn) == versions()
    assert versions()[:7] == ["0002_blobgc_schema", "0003_paste_expiry", "0004_image_crawler", "0005_reconcile",
                              "0006_generations", "0007_audit_restore", "0008_safety"]


def test_blobgc_creates_no_schema_but_its_own(new_database):
    with connect(new_database()) as conn:
        before = schema_names(conn)
        assert apply_migrations(conn) == versions()
        assert schema_names(conn) - before == {"blobgc"}


def test_blobgc_migrates_beside_a_users_own_app_post_table(new_database):
    with connect(new_database()) as conn:
        conn.execute("CREATE SCHEMA app; CREATE TABLE app.post (post_id uuid PRIMARY KEY, body jsonb NOT NULL, "
                     "author text); INSERT INTO app.post VALUES (gen_random_uuid(), '{}', 'someone')")
        before = schema_of(conn, "app")
        assert apply_migrations(conn) == versions()
        assert schema_of(conn, "app") == before
        assert conn.execute("SELECT author FROM app.post").fetchall() == [("someone",)]
        assert "blobgc" in schema_names(conn)


def test_blobgc_builds_its_concurrent_index_valid(new_database):
    with connect(new_database()) as conn:
        apply_migrations(conn)
        assert index_is_valid(conn, "blobgc.deletion_log_source_idx")


def test_racing_migrators_apply_each_version_once(new_database):
    dsn = new_database()
    start = threading.Barrier(2)

    def migrate(_):
        with connect(dsn) as conn:
            start.wait()
            return apply_migrations(conn)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(migrate, range(2)))
    assert sorted(results, key=len) == [[], versions()]
    with connect(dsn) as conn:
        assert recorded(conn) == versions()


def test_a_migration_edited_after_it_was_applied_is_refused(new_database, tmp_path):
    dsn = new_database()
    write_migrations(tmp_path, {"0001_item": "CREATE TABLE item (id int PRIMARY KEY);\n"})
    assert apply_scratch(dsn, tmp_path) == ["0001_item"]
    write_migrations(tmp_path, {"0001_item": "CREATE TABLE item (id bigint PRIMARY KEY);\n"})
    with pytest.raises(MigrationChanged, match="0001_item"):
        apply_scratch(dsn, tmp_path)


def test_a_no_transaction_migration_builds_an_index_concurrently(new_database, tmp_path):
    dsn = new_database()
    folder = write_migrations(tmp_path, {
        "0001_item": "CREATE TABLE item (id int PRIMARY KEY, code text);\n"
                     "INSERT INTO item SELECT i, 'c' || i FROM generate_series(1, 1000) i;\n",
        "0002_item_code": f"{NO_TRANSACTION}\n-- built without blocking writers\n"
                          "DROP INDEX CONCURRENTLY IF EXISTS item_code_idx;\n"
                          "CREATE UNIQUE INDEX CONCURRENTLY item_code_idx ON item (code);\n",
    })
    assert apply_scratch(dsn, folder) == ["0001_item", "0002_item_code"]
    with connect(dsn) as conn:
        assert index_is_valid(conn, "item_code_idx")


def test_a_failed_no_transaction_migration_is_not_recorded_and_reruns(new_database, tmp_path):
    dsn = new_database()
    folder = write_migrations(tmp_path, {
        "0001_item": "CREATE TABLE item (id int PRIMARY KEY, code text);\n"
                     "INSERT INTO item VALUES (1, 'same'), (2, 'same'), (3, 'other');\n",
        "0002_item_code": f"{NO_TRANSACTION}\n"
                          "DROP INDEX CONCURRENTLY IF EXISTS item_code_idx;\n"
                          "CREATE UNIQUE INDEX CONCURRENTLY item_code_idx ON item (code);\n",
    })
    with pytest.raises(psycopg.errors.UniqueViolation):
        apply_scratch(dsn, folder)
    with connect(dsn) as conn:
        assert recorded(conn, SCRATCH_TABLE) == ["0001_item"]
        assert not index_is_valid(conn, "item_code_idx")  # what a failed build leaves: the re-run drops it first
        conn.execute("DELETE FROM item WHERE id = 2")
    assert apply_scratch(dsn, folder) == ["0002_item_code"]
    with connect(dsn) as conn:
        assert index_is_valid(conn, "item_code_idx")


def test_a_migration_gives_up_on_a_lock_the_application_holds(new_database, tmp_path, monkeypatch):
    dsn = new_database()
    write_migrations(tmp_path, {"0001_item": "CREATE TABLE item (id int PRIMARY KEY);\n"})
    assert apply_scratch(dsn, tmp_path) == ["0001_item"]
    write_migrations(tmp_path, {"0002_item_note": "ALTER TABLE item ADD COLUMN note text;\n"})
    monkeypatch.setenv("BLOBGC_MIGRATION_LOCK_TIMEOUT", "300ms")
    with psycopg.connect(dsn) as application, connect(dsn) as conn:
        own_timeout = conn.execute("SHOW lock_timeout").fetchone()
        application.execute("SELECT * FROM item")  # a long transaction of the application's: ACCESS SHARE held
        started = time.monotonic()
        with pytest.raises(MigrationLockTimeout, match=r"0002_item_note waited more than 300ms .* not recorded"):
            apply_migrations(conn, folder=tmp_path, table=SCRATCH_TABLE, lock=SCRATCH_LOCK)
        assert time.monotonic() - started < 5
        assert recorded(conn, SCRATCH_TABLE) == ["0001_item"]
        assert conn.execute("SHOW lock_timeout").fetchone() == own_timeout
        application.rollback()
        assert apply_migrations(conn, folder=tmp_path, table=SCRATCH_TABLE, lock=SCRATCH_LOCK) == ["0002_item_note"]


def test_a_database_migrated_before_the_split_goes_on_from_0009(new_database):
    fresh, legacy = new_database(), new_database()
    with connect(fresh) as conn:
        apply_migrations(conn)
        app_migrate.apply_app_migrations(conn)
        expected = schema_of(conn, "app", "gen", "blobgc")
    with connect(legacy) as conn:
        migrate_the_old_way(conn, LEGACY_VERSIONS)
        assert apply_migrations(conn) == [v for v in versions() if v[:4] > "0008"]
        # the legacy ones are recorded, not run (0001 would fail on app.blob); later ones run
        assert app_migrate.apply_app_migrations(conn) == [v for v in versions(APP) if v[:4] > "0005"]
        assert recorded(conn, app_migrate.TABLE) == versions(APP)
        assert schema_of(conn, "app", "gen", "blobgc") == expected
        assert apply_migrations(conn) == app_migrate.apply_app_migrations(conn) == []


def test_status_lists_applied_and_pending_and_a_schema_behind_is_refused(new_database, monkeypatch, capsys):
    from blobgc.core.migrations import SchemaBehind, check_schema_current, main, pending_versions

    dsn = new_database()
    with connect(dsn) as conn:
        assert pending_versions(conn) == versions()  # no bookkeeping table yet: everything is pending
        with pytest.raises(SchemaBehind, match="behind the code: 0002_blobgc_schema, .* are not applied. "
                                               r"Run `python -m blobgc.migrate --conn-id blobgc_postgres`"):
            check_schema_current(conn)
        apply_migrations(conn)
        check_schema_current(conn)
        last = versions()[-1]
        conn.execute("DELETE FROM blobgc.schema_migration WHERE version = %s", (last,))
        with pytest.raises(SchemaBehind, match=f"{last} is not applied"):
            check_schema_current(conn)
    monkeypatch.setenv("BLOBGC_PG_DSN", dsn)
    assert main(["--status"]) == 0
    printed = capsys.readouterr().out
    assert f"{len(versions()) - 1} applied, 1 pending" in printed and f"pending  {last}" in printed
    assert f"applied  {versions()[0]}" in printed


def test_migrate_reports_the_migrations_it_applied_by_name(new_database, tmp_path, monkeypatch, capsys):
    """Issue 30: "11 applied" said neither which nor of what; the report names the first and last applied, and
    what the database had before (blobgc's numbering starts at 0002, which its folder's README explains)."""
    from blobgc.core.migrations import main

    every = versions()
    dsn = new_database()
    monkeypatch.setenv("BLOBGC_PG_DSN", dsn)
    assert main([]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"[migrate] blobgc.schema_migration: {len(every)} migrations applied now ({every[0]} … {every[-1]}), "
        f"0 of {len(every)} applied before; the schema is at {every[-1]}")
    assert main([]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"[migrate] blobgc.schema_migration: no migration to apply, {len(every)} of {len(every)} applied before; "
        f"the schema is at {every[-1]}")
    folder = write_migrations(tmp_path, {"0001_item": "CREATE TABLE item (id int PRIMARY KEY);\n"})
    assert main([], folder=folder, table=SCRATCH_TABLE, lock=SCRATCH_LOCK) == 0
    write_migrations(tmp_path, {"0002_item_code": "ALTER TABLE item ADD code text;\n"})
    assert main([], folder=folder, table=SCRATCH_TABLE, lock=SCRATCH_LOCK) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"[migrate] {SCRATCH_TABLE}: 1 migration applied now (0002_item_code), 1 of 2 applied before; "
        "the schema is at 0002_item_code")
    assert every[0] == "0002_blobgc_schema"
    assert "starts at 0002" in (BLOBGC / "README.md").read_text()


def test_python_m_blobgc_migrate_works_through_an_airflow_connection(new_database):
    """`python -m blobgc.migrate --conn-id …`: the database the DAGs' connection names, its extras kept."""
    import os
    import subprocess
    import sys

    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(new_database())
    uri = (f"postgresql://{parts.get('user', 'postgres')}@{parts['host']}:{parts['port']}/{parts['dbname']}"
           "?application_name=migrate-test")
    env = {**os.environ, "AIRFLOW_CONN_BLOBGC_SCRATCH": uri, "BLOBGC_PG_DSN": "",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "plugins"),
                                          os.environ.get("PYTHONPATH", "")])}

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "blobgc.migrate", "--conn-id", "blobgc_scratch", *args],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert f"0 applied, {len(versions())} pending" in run("--status")
    assert (f"{len(versions())} migrations applied now ({versions()[0]} … {versions()[-1]}), "
            f"0 of {len(versions())} applied before; the schema is at {versions()[-1]}") in run()
    assert f"{len(versions())} applied, 0 pending" in run("--status")
