"""Clients for PostgreSQL, S3 and Redis built from plain settings or from `.blobgc/env` variables.

`blobgc.dag_kit.connections` builds the same clients from Airflow connections, through the providers'
hooks; tests and benchmarks use the `*_from_env` functions here.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
import psycopg
import redis
from botocore.config import Config
from psycopg.conninfo import conninfo_to_dict

# Transport-level retries belong to botocore; DeleteObjects' per-key Errors[] are ours (blobgc.objects).
# Checksums only where the API requires them (DeleteObjects still gets one): botocore's default of a
# CRC32 on every request costs S3-compatible servers dearly (measured 3x slower DeleteObjects on moto).
# Retries in botocore's adaptive mode: past a throttling answer (SlowDown, 503) the client also slows its own sending
# (a client-side token bucket); blobgc's rate cap shared by every worker is the layer above it (blobgc.core.rate).
# A connection's config_kwargs override both (e.g. {"retries": {"mode": "standard"}}).
S3_CONFIG = Config(
    retries={"max_attempts": 4, "mode": "adaptive"},
    connect_timeout=5,
    read_timeout=60,
    max_pool_connections=32,
    request_checksum_calculation="when_required",
    response_checksum_validation="when_required",
)


def require_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run `make up` and `source .blobgc/env`")
    return value


class NotingCursor(psycopg.Cursor[Any]):
    """A cursor that notes on a statement or lock timeout which statement was cancelled (`error.blobgc_statement`),
    so that the task's failure can name it (`blobgc.core.timeouts`)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        try:
            return super().execute(query, params, **kwargs)
        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as error:
            setattr(error, "blobgc_statement", query)  # noqa: B010 - psycopg errors take attributes
            raise


def pg_connect(conninfo: str, **kwargs: Any) -> psycopg.Connection:
    """A psycopg 3 connection in autocommit mode: every unit of work opens `conn.transaction()` itself.

    Statements are not auto-prepared, so each key range gets a plan for its own bounds. Parallel
    query is off: blobgc runs short batch statements, where starting parallel workers costs more
    (measured 20 ms on a 1000-id reference check) than it saves; blobgc parallelizes by key range.
    """
    kwargs.setdefault("autocommit", True)
    if "connect_timeout" not in conninfo_to_dict(conninfo):  # a connection's own connect_timeout extra wins
        kwargs.setdefault("connect_timeout", 10)
    conn = psycopg.connect(conninfo, **kwargs)
    conn.cursor_factory = NotingCursor
    conn.prepare_threshold = None
    conn.execute("SET max_parallel_workers_per_gather = 0")
    return conn


def pg_connect_from_env(**kwargs: Any) -> psycopg.Connection:
    return pg_connect(require_env("BLOBGC_PG_DSN"), **kwargs)


def s3_client(endpoint_url: str | None = None, **kwargs: Any) -> Any:
    return boto3.client("s3", endpoint_url=endpoint_url, config=S3_CONFIG, **kwargs)


def s3_client_from_env() -> Any:
    return s3_client(
        require_env("BLOBGC_S3_ENDPOINT"),
        aws_access_key_id=require_env("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=require_env("AWS_SECRET_ACCESS_KEY"),
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    )


def redis_from_env() -> redis.Redis:
    return redis.Redis.from_url(require_env("BLOBGC_REDIS_URL"), socket_timeout=10)
