"""What every benchmark under bench/ shares: a fresh, migrated database on the local stack, and timing."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from blobgc.core.clients import require_env  # noqa: E402
from blobgc.core.migrations import apply_migrations  # noqa: E402
from demo_app.migrate import apply_app_migrations  # noqa: E402

BENCH_DB = "blobgc_bench"


def fresh_database(*extra_sql: Path) -> str:
    """Drop and recreate the benchmark database on the stack's PostgreSQL, migrate it (blobgc, then the demo
    application), run `extra_sql`."""
    admin = make_conninfo(require_env("BLOBGC_PG_DSN"), dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DB}"')
    dsn = make_conninfo(require_env("BLOBGC_PG_DSN"), dbname=BENCH_DB)
    with psycopg.connect(dsn) as conn:
        apply_migrations(conn)
        apply_app_migrations(conn)
        for path in extra_sql:
            conn.execute(path.read_text())
    return dsn


def drop_database() -> None:
    """Drop the benchmark database (`BENCH_DB`, as the benchmark set it)."""
    admin = make_conninfo(require_env("BLOBGC_PG_DSN"), dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')


def empty_bucket(s3, bucket: str) -> None:
    """Delete every object of a benchmark's own bucket, then the bucket."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    s3.delete_bucket(Bucket=bucket)


def timed(fn):
    """(seconds, value) of calling `fn`."""
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def vacuum(conn, *tables: str) -> None:
    for table in tables:
        conn.execute(f"VACUUM ANALYZE {table}")


def objects_present(s3, bucket: str, keys: list[str]) -> int:
    """How many of `keys` exist in the bucket (HEAD, 8 at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    def exists(key: str) -> bool:
        try:
            s3.head_object(Bucket=bucket, Key=key)
            return True
        except s3.exceptions.ClientError:
            return False

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(exists, keys))
