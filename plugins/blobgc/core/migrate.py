"""Apply include/sql/migrations/NNNN_*.sql in order, once each, remembering what was applied.

Run with `python -m blobgc.migrate` (BLOBGC_PG_DSN names the database). Each migration runs in
its own transaction under an advisory lock, so two runners never apply one migration twice.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys

import psycopg

from blobgc.core.queries import sql_root

log = logging.getLogger(__name__)

MIGRATION_LOCK = 0x626C6F62  # "blob"

BOOKKEEPING = """
CREATE SCHEMA IF NOT EXISTS blobgc;
CREATE TABLE IF NOT EXISTS blobgc.schema_migration (
    version     text PRIMARY KEY,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
"""


class MigrationChanged(RuntimeError):
    """An applied migration's file was edited afterwards; add a new migration instead."""


def migrations() -> list[tuple[str, str]]:
    folder = sql_root() / "migrations"
    return [(p.stem, p.read_text()) for p in sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.sql"))]


def apply_migrations(conn: psycopg.Connection) -> list[str]:
    """Apply every pending migration and return the versions applied now."""
    applied_now: list[str] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        with conn.transaction():
            conn.execute(BOOKKEEPING)
        done = dict(conn.execute("SELECT version, checksum FROM blobgc.schema_migration").fetchall())
        for version, text in migrations():
            checksum = hashlib.sha256(text.encode()).hexdigest()
            if version in done:
                if done[version] != checksum:
                    raise MigrationChanged(f"migration {version} changed after it was applied")
                continue
            with conn.transaction():
                conn.execute(text)
                conn.execute(
                    "INSERT INTO blobgc.schema_migration (version, checksum) VALUES (%s, %s)",
                    (version, checksum),
                )
            applied_now.append(version)
            log.info("applied migration %s", version)
    finally:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return applied_now


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="[migrate] %(message)s")
    dsn = os.environ.get("BLOBGC_PG_DSN")
    if not dsn:
        print("BLOBGC_PG_DSN is not set: source .blobgc/env first", file=sys.stderr)
        return 2
    with psycopg.connect(dsn) as conn:
        applied = apply_migrations(conn)
    print(f"[migrate] {len(applied)} applied, {len(migrations()) - len(applied)} already there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
