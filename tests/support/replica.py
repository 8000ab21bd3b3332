"""A deliberately stale read replica: a database of its own, migrated as the test database is, holding a snapshot of
the test database's application tables taken when the test says (`snapshot`). What the primary changes afterwards,
the replica has not "replayed": a replica lagging by as long as the test likes."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from blobgc.core.clients import pg_connect
from blobgc.core.migrations import apply_migrations
from demo_app.migrate import apply_app_migrations
from tests.helpers import TEST_DB

REPLICA_DB = f"{TEST_DB}_replica"
SCHEMAS = ("app", "gen")  # the application's tables (blobgc's own mark tables are added by `snapshot`)


@pytest.fixture(scope="session")
def replica_dsn(test_dsn) -> str:
    """The stale replica's database, created and migrated once a session."""
    admin = make_conninfo(test_dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{REPLICA_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{REPLICA_DB}"')
    dsn = make_conninfo(test_dsn, dbname=REPLICA_DB)
    with psycopg.connect(dsn) as conn:
        apply_migrations(conn)
        apply_app_migrations(conn)
    return dsn


@pytest.fixture
def replica(replica_dsn) -> Iterator[psycopg.Connection]:
    """A connection to the stale replica (autocommit, as blobgc's are)."""
    conn = pg_connect(replica_dsn)
    yield conn
    conn.close()


def replica_connector(replica_dsn: str) -> Callable[[], psycopg.Connection]:
    return lambda: pg_connect(replica_dsn)


def replica_connection_env(replica_dsn: str) -> dict[str, str]:
    """Connection blobgc_postgres_replica, pointed at the stale replica, as a DAG run's environment."""
    parts = conninfo_to_dict(replica_dsn)
    return {"AIRFLOW_CONN_BLOBGC_POSTGRES_REPLICA": json.dumps(
        {"conn_type": "postgres", "host": parts["host"], "port": int(parts["port"]),
         "login": parts.get("user", "postgres"), "schema": parts["dbname"]})}


def _tables(conn: psycopg.Connection, schemas: tuple[str, ...]) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables "
        "WHERE schemaname = ANY(%s) OR (schemaname = 'blobgc' AND tablename LIKE 'mark\\_%%') ORDER BY 1",
        (list(SCHEMAS + schemas),))]


def snapshot(primary: psycopg.Connection, replica: psycopg.Connection, schemas: tuple[str, ...] = ()) -> None:
    """The replica catches up: every application table (and blobgc's mark tables, and the tables of `schemas`, which
    the test created on the replica too) as the primary has it now."""
    tables = _tables(primary, schemas)
    with replica.transaction():
        replica.execute("SET LOCAL session_replication_role = replica")  # rows copied in any order: no FK checks
        for table in (t for t in tables if t.startswith("blobgc.mark_")):
            id_type = primary.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                                      "WHERE attrelid = %s::regclass AND attname = 'id'", (table,)).fetchone()[0]
            replica.execute(f"CREATE TABLE IF NOT EXISTS {table} "
                            f"(id {id_type} PRIMARY KEY, unused_since timestamptz NOT NULL DEFAULT now())")
        replica.execute("TRUNCATE " + ", ".join(tables) + " CASCADE")
        for table in tables:
            with primary.cursor().copy(f"COPY {table} TO STDOUT (FORMAT binary)") as out, \
                    replica.cursor().copy(f"COPY {table} FROM STDIN (FORMAT binary)") as into:
                for chunk in out:
                    into.write(chunk)
