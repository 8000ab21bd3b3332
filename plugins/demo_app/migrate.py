"""Apply the demo application's migrations (plugins/demo_app/migrations/NNNN_*.sql): its schemas app and gen.

Run with `python -m demo_app.migrate` (BLOBGC_PG_DSN names the database), after `python -m blobgc.migrate`.
The application owns its tables and their history, so blobgc's migrations create schema blobgc only; this is
blobgc's runner with a record table (app.schema_migration) and advisory lock of the application's own.

Before the split, blobgc's migrations 0001_app_schema .. 0008_safety created these tables too. On a database
migrated then, the migrations below that came out of them are recorded without running (see legacy_versions).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import psycopg

from blobgc.core import migrations as migrate

FOLDER = Path(__file__).resolve().parent / "migrations"
TABLE = "app.schema_migration"
LOCK = 0x64656D6F  # "demo"

# Each migration of ours and the blobgc migration it was part of before the split.
FROM_BLOBGC = {
    "0001_app_schema": "0001_app_schema",
    "0002_paste_expiry_index": "0003_paste_expiry",
    "0003_crawl_requests": "0004_image_crawler",
    "0004_mail_blob_sizes": "0006_generations",
    "0005_image_unbound_stamp": "0008_safety",
}


def legacy_versions(conn: psycopg.Connection, recorded: Mapping[str, str]) -> set[str]:
    """Our versions that blobgc's old, combined migrations already applied.

    blobgc.schema_migration records such a migration with the checksum of its old contents: one recorded with
    the checksum of blobgc's file now was applied after the split, without our part (a database migrated before
    0006_generations, say, gets 0006 from blobgc alone and 0004_mail_blob_sizes from here).
    """
    if conn.execute("SELECT to_regclass('blobgc.schema_migration')").fetchone()[0] is None:
        return set()
    theirs = dict(conn.execute("SELECT version, checksum FROM blobgc.schema_migration").fetchall())
    now = {version: migrate.checksum(text) for version, text in migrate.migrations()}
    combined = {version for version, recorded_sum in theirs.items() if recorded_sum != now.get(version)}
    return {ours for ours, old in FROM_BLOBGC.items() if old in combined}


def apply_app_migrations(conn: psycopg.Connection) -> list[str]:
    """Apply the demo application's pending migrations and return the versions applied now."""
    return migrate.apply_migrations(conn, folder=FOLDER, table=TABLE, lock=LOCK, legacy=legacy_versions)


if __name__ == "__main__":
    sys.exit(migrate.main(folder=FOLDER, table=TABLE, lock=LOCK, legacy=legacy_versions))
