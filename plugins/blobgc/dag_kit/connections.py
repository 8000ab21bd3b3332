"""Clients from the Airflow connections blobgc reads (CONTRACT §2): PostgreSQL, S3 and Redis."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from botocore.config import Config
from psycopg.conninfo import make_conninfo

from blobgc.core.clients import S3_CONFIG, pg_connect
from blobgc.core.settings import ConfigurationError

PG_CONN_ID = "blobgc_postgres"
S3_CONN_ID = "blobgc_s3"
REDIS_CONN_ID = "blobgc_redis"


def pg_conninfo(conn_id: str = PG_CONN_ID) -> str:
    """The libpq connection string of a `postgres` connection. Every extra that is a libpq keyword
    (`sslmode`, `sslcert`, `sslkey`, `sslrootcert`, `sslcrl`, `options`, `target_session_attrs`,
    `keepalives`, ...) reaches libpq as it is; the connection's own fields and other extras (the
    provider's `cursor`, `iam`, ...) do not."""
    from airflow.sdk import Connection

    c = Connection.get(conn_id)
    return conninfo_of(host=c.host, port=c.port, login=c.login, password=c.password, schema=c.schema,
                       extra=c.extra_dejson)


def conninfo_of(*, host: str | None, port: int | None, login: str | None, password: str | None,
                schema: str | None, extra: dict) -> str:
    if extra.get("iam"):
        raise ConfigurationError("the blobgc_postgres connection asks for IAM authentication (extra `iam`), which "
                                 "blobgc does not generate tokens for yet: use a password or a client certificate")
    passed = {k: v for k, v in extra.items() if k in LIBPQ_KEYWORDS - OWN_FIELDS}
    passed.setdefault("application_name", "blobgc")
    return make_conninfo(host=host or "localhost", port=port or 5432, user=login or None,
                         password=password or None, dbname=schema or None, **passed)


LIBPQ_KEYWORDS = frozenset(d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults())
OWN_FIELDS = frozenset({"host", "port", "user", "password", "dbname"})  # the connection's fields, not its extra


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
    """A boto3 S3 client from the `aws` connection, through the provider's S3Hook; `endpoint_url` in its extra
    points at any S3-compatible store, and its `config_kwargs` (retries, addressing style, timeouts) are
    honoured over blobgc's defaults (`client_config`)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from airflow.sdk import Connection

    extra = Connection.get(conn_id).extra_dejson
    return S3Hook(aws_conn_id=conn_id, config=client_config(extra)).get_conn()


def client_config(extra: dict) -> Config:
    """blobgc's botocore defaults (`blobgc.core.clients.S3_CONFIG`) under the connection's `config_kwargs`:
    a setting the connection makes wins. S3Hook uses a `config` given to it instead of the connection's."""
    kwargs = extra.get("config_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigurationError(f"the S3 connection's extra config_kwargs must be a JSON object, got {kwargs!r}")
    try:
        return S3_CONFIG.merge(Config(**kwargs))
    except TypeError as error:
        raise ConfigurationError(f"the S3 connection's extra config_kwargs are not botocore Config options: "
                                 f"{error}") from error


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
