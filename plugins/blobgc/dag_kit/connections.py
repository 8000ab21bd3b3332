"""Clients from the Airflow connections blobgc reads (CONTRACT §2): PostgreSQL, S3 and Redis."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import make_conninfo

from blobgc.core.clients import S3_CONFIG, pg_connect

PG_CONN_ID = "blobgc_postgres"
S3_CONN_ID = "blobgc_s3"
REDIS_CONN_ID = "blobgc_redis"


def pg_conninfo(conn_id: str = PG_CONN_ID) -> str:
    from airflow.sdk import Connection

    c = Connection.get(conn_id)
    extra = {k: v for k, v in c.extra_dejson.items() if k in {"sslmode", "sslrootcert", "application_name",
                                                               "options", "target_session_attrs"}}
    return make_conninfo(
        host=c.host or "localhost", port=c.port or 5432, user=c.login or None, password=c.password or None,
        dbname=c.schema or None, application_name=extra.pop("application_name", "blobgc"), **extra,
    )


@contextmanager
def pg_connection(conn_id: str = PG_CONN_ID) -> Iterator[psycopg.Connection]:
    """A psycopg 3 connection (autocommit; work opens its own transactions) from an Airflow connection."""
    conn: psycopg.Connection = pg_connect(pg_conninfo(conn_id))
    try:
        yield conn
    finally:
        conn.close()


def pg_connector(conn_id: str = PG_CONN_ID) -> Callable[[], psycopg.Connection]:
    """A zero-argument factory of further connections, for work spread over several connections."""
    conninfo = pg_conninfo(conn_id)
    return lambda: pg_connect(conninfo)


def s3_client(conn_id: str = S3_CONN_ID):
    """A boto3 S3 client from the `aws` connection; `endpoint_url` in its extra points at any S3-compatible store."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook(aws_conn_id=conn_id, config=S3_CONFIG).get_conn()


def redis_client(conn_id: str = REDIS_CONN_ID):
    from airflow.providers.redis.hooks.redis import RedisHook

    return RedisHook(redis_conn_id=conn_id).get_conn()


class S3ByBucket:
    """One S3 client over several connections: each call goes to the client of its `Bucket` argument.

    Collections may keep their objects behind their own connection (`s3_conn_id`, CONTRACT §6);
    the outbox, which drains every source's keys in one pass, and restore talk to all of them
    through this. Calls without a bucket, and buckets of no collection, use the default client.
    """

    def __init__(self, default, by_bucket: dict[str, object]) -> None:
        self._default = default
        self._by_bucket = by_bucket

    def client_for(self, bucket: str | None):
        return self._by_bucket.get(bucket or "", self._default)

    def get_paginator(self, operation: str):
        by_bucket = self

        class Paginator:
            def paginate(self, **kwargs):
                return by_bucket.client_for(kwargs.get("Bucket")).get_paginator(operation).paginate(**kwargs)

        return Paginator()

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        attribute = getattr(self._default, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            return getattr(self.client_for(kwargs.get("Bucket")), name)(*args, **kwargs)

        return call
