"""Clients from the Airflow connections blobgc reads (docs/reference.md §2): PostgreSQL, the object stores (S3, GCS,
Azure Blob Storage) and Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from botocore.config import Config
from psycopg.conninfo import make_conninfo

from blobgc.core.clients import S3_CONFIG, pg_connect
from blobgc.core.objects import ObjectStore, Paginator, StoreUnknown
from blobgc.core.settings import ConfigurationError
from blobgc.core.timeouts import Timeouts

if TYPE_CHECKING:
    import redis
    from airflow.providers.postgres.hooks.postgres import PostgresHook
    from redis.cluster import RedisCluster

PG_CONN_ID = "blobgc_postgres"
S3_CONN_ID = "blobgc_s3"
REDIS_CONN_ID = "blobgc_redis"


def pg_conninfo(conn_id: str = PG_CONN_ID) -> str:
    """The libpq connection string of a `postgres` connection, as the provider's PostgresHook reads it."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    return hook_conninfo(PostgresHook(postgres_conn_id=conn_id))


# The extras PostgresHook reads itself rather than passing to the driver (its `ignored_extra_options`, as of
# provider 7.1; older releases read the same names without listing them on the class).
HOOK_EXTRA_OPTIONS = frozenset(
    {
        "iam",
        "redshift",
        "redshift-serverless",
        "cursor",
        "cluster-identifier",
        "workgroup-name",
        "aws_conn_id",
        "sqlalchemy_scheme",
        "sqlalchemy_query",
        "azure_conn_id",
    }
)


def hook_conninfo(hook: PostgresHook) -> str:
    """What `hook.get_conn()` would connect with, as a conninfo for blobgc's own psycopg 3 connection.

    The same parameters, from the hook itself: the connection's fields, IAM through the hook's
    `get_iam_token` (AWS RDS, Redshift, Redshift Serverless, or Azure with `azure_conn_id`) when the
    extra says `iam`, then every extra but the hook's `ignored_extra_options`, which win over the
    fields as they do in the hook. Only two differences: `cursor` (a row factory for the hook) is
    ignored, since blobgc reads tuples, and `application_name` defaults to "blobgc". An extra libpq
    does not know (a misspelt `sslmode`) is refused here, as libpq would refuse it, naming it.
    """
    connection = hook.connection
    extra = connection.extra_dejson
    login, password, port = connection.login, connection.password, connection.port
    if extra.get("iam", False):
        login, password, port = hook.get_iam_token(connection)
    fields = {
        "host": connection.host,
        "user": login,
        "password": password,
        "dbname": hook.database or connection.schema,
        "port": port,
    }
    params = {k: v for k, v in fields.items() if v not in (None, "")}
    ignored = getattr(hook, "ignored_extra_options", HOOK_EXTRA_OPTIONS)
    params.update((k, v) for k, v in extra.items() if k not in ignored)
    if unknown := sorted(set(params) - LIBPQ_KEYWORDS):
        raise ConfigurationError(
            f"the {hook.get_conn_id()} connection's extra has {', '.join(unknown)}: neither a "
            f"libpq keyword (sslmode, sslcert, options, ...) nor an extra PostgresHook reads "
            f"({', '.join(sorted(ignored))})"
        )
    params.setdefault("application_name", "blobgc")
    return make_conninfo(**params)


LIBPQ_KEYWORDS = frozenset(d.keyword.decode() for d in psycopg.pq.Conninfo.get_defaults())


@contextmanager
def pg_connection(conn_id: str = PG_CONN_ID, timeouts: Timeouts | None = None) -> Iterator[psycopg.Connection]:
    """A psycopg 3 connection (autocommit; work opens its own transactions) from an Airflow connection, under
    `timeouts` (a task's: Variable blobgc_db_timeouts) when given."""
    conn: psycopg.Connection = pg_connect(pg_conninfo(conn_id))
    try:
        if timeouts is not None:
            timeouts.apply(conn)
        yield conn
    finally:
        conn.close()


def pg_connector(conn_id: str = PG_CONN_ID, timeouts: Timeouts | None = None) -> Callable[[], psycopg.Connection]:
    """A zero-argument factory of further connections, for work spread over several connections, each under
    `timeouts` when given; with IAM, each connection gets a token of its own (a token lives 15 minutes)."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    hook = PostgresHook(postgres_conn_id=conn_id)
    conninfo = hook_conninfo(hook)  # a bad connection fails here, before any work

    def connect(info: str) -> psycopg.Connection:
        conn = pg_connect(info)
        if timeouts is not None:
            timeouts.apply(conn)
        return conn

    if hook.connection.extra_dejson.get("iam", False):
        return lambda: connect(hook_conninfo(hook))
    return lambda: connect(conninfo)


def replica_connector(timeouts: Timeouts | None = None) -> Callable[[], psycopg.Connection] | None:
    """Connections to the read replica of connection `blobgc_postgres_replica` (`blobgc.core.replica`), under
    `timeouts`; None when no such connection is defined (every scan reads the primary)."""
    from airflow.sdk import Connection
    from airflow.sdk.exceptions import AirflowNotFoundException

    from blobgc.core.replica import REPLICA

    try:
        Connection.get(REPLICA)
    except AirflowNotFoundException:
        return None
    return pg_connector(REPLICA, timeouts)


def s3_client(conn_id: str = S3_CONN_ID):
    """A boto3 S3 client from the `aws` connection, through the provider's S3Hook; `endpoint_url` in its extra
    points at any S3-compatible store, and its `config_kwargs` (retries, addressing style, timeouts) are
    honoured over blobgc's defaults (`client_config`)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook
    from airflow.sdk import Connection

    extra = Connection.get(conn_id).extra_dejson
    return S3Hook(aws_conn_id=conn_id, config=client_config(extra)).get_conn()


# The connection types that name a store, and the extra that brings its provider (README, "Object stores").
STORE_TYPES = {"aws": "S3", "google_cloud_platform": "Google Cloud Storage", "wasb": "Azure Blob Storage"}
STORE_EXTRAS = {"google_cloud_platform": "blobgc[gcs]", "wasb": "blobgc[azure]"}


def store_client(conn_id: str = S3_CONN_ID) -> ObjectStore:
    """The object store behind connection `conn_id`, picked by the connection's type: an S3 client (`aws`), a
    `blobgc.core.stores.gcs.GcsStore` through the Google provider's GCSHook (`google_cloud_platform`), or a
    `blobgc.core.stores.azure.AzureStore` through the Azure provider's WasbHook (`wasb`). Every one answers the
    core's `ObjectStore` calls."""
    from airflow.sdk import Connection

    conn_type = Connection.get(conn_id).conn_type or ""
    try:
        if conn_type == "aws":
            return s3_client(conn_id)
        if conn_type == "google_cloud_platform":
            from blobgc.dag_kit.store_gcs import gcs_store

            return gcs_store(conn_id)
        if conn_type == "wasb":
            from blobgc.dag_kit.store_azure import azure_store

            return azure_store(conn_id)
    except ModuleNotFoundError as error:
        raise ConfigurationError(
            f"connection {conn_id!r} is of type {conn_type!r}, {STORE_TYPES[conn_type]}, whose provider is not "
            f"installed ({error.name} is missing): install {STORE_EXTRAS.get(conn_type, 'blobgc')}"
        ) from error
    raise ConfigurationError(
        f"connection {conn_id!r} is of type {conn_type!r}, which names no object store blobgc knows: give it one of "
        + ", ".join(f"{t} ({name})" for t, name in STORE_TYPES.items())
    )


def client_config(extra: dict) -> Config:
    """blobgc's botocore defaults (`blobgc.core.clients.S3_CONFIG`) under the connection's `config_kwargs`:
    a setting the connection makes wins. S3Hook uses a `config` given to it instead of the connection's."""
    kwargs = extra.get("config_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigurationError(f"the S3 connection's extra config_kwargs must be a JSON object, got {kwargs!r}")
    try:
        return S3_CONFIG.merge(Config(**kwargs))
    except TypeError as error:
        raise ConfigurationError(
            f"the S3 connection's extra config_kwargs are not botocore Config options: {error}"
        ) from error


def redis_client(conn_id: str = REDIS_CONN_ID) -> redis.Redis | RedisCluster:
    """The client of the `redis` connection, through the provider's RedisHook: a `redis.Redis`, or with
    extra `cluster: true` (bootstrap nodes in `startup_nodes`) a `RedisCluster`, which the cache purge
    sends one UNLINK per hash slot; `db`, `ssl` and the `ssl_*` extras as the hook reads them."""
    from airflow.providers.redis.hooks.redis import RedisHook

    return RedisHook(redis_conn_id=conn_id).get_conn()


class StoreByBucket:
    """One object store over several connections (a `blobgc.core.objects.ObjectStore`): each call goes to the client
    of its `Bucket` argument, whichever store that is (S3, GCS, Azure Blob Storage).

    Collections may keep their objects behind their own connection (`conn_id`, docs/reference.md §6), and so may
    the seed kinds' buckets (Variable blobgc_bucket_connections); the outbox, which drains every source's keys in
    one pass, restore and reconcile talk to all of them through this. Calls without a bucket, and buckets of no
    such connection, use the default client (`blobgc_s3`).
    """

    def __init__(
        self,
        default: ObjectStore,
        by_bucket: dict[str, ObjectStore],
        *,
        known: frozenset[str] = frozenset(),
        unknown: str | None = None,
    ) -> None:
        self._default = default
        self._by_bucket = by_bucket
        self._known = known  # buckets whose connection is known (the default's among them)
        self._unknown = unknown  # why another bucket's store is unknown; None: every other bucket is the default's

    def client_for(self, bucket: str | None) -> ObjectStore:
        """The store of `bucket`'s connection; with the collections file unusable, a bucket of no known connection
        raises StoreUnknown (its owed objects stay owed) instead of going to the default store."""
        if bucket and bucket in self._by_bucket:
            return self._by_bucket[bucket]
        if self._unknown is not None and bucket and bucket not in self._known:
            raise StoreUnknown(bucket, self._unknown)
        return self._default

    def get_paginator(self, operation_name: str) -> Paginator:
        by_bucket = self

        class ByBucketPaginator:
            def paginate(self, **kwargs: Any) -> Iterable[dict[str, Any]]:
                return by_bucket.client_for(kwargs.get("Bucket")).get_paginator(operation_name).paginate(**kwargs)

        return ByBucketPaginator()

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).list_objects_v2(**kwargs)

    def head_object(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).head_object(**kwargs)

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).get_object(**kwargs)

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).put_object(**kwargs)

    def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).delete_objects(**kwargs)

    def get_bucket_versioning(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).get_bucket_versioning(**kwargs)

    def get_bucket_lifecycle_configuration(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).get_bucket_lifecycle_configuration(**kwargs)

    # copies go to the client of the target bucket (`Bucket`); blobgc copies only within a bucket
    def copy_object(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).copy_object(**kwargs)

    def create_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).create_multipart_upload(**kwargs)

    def upload_part_copy(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).upload_part_copy(**kwargs)

    def complete_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).complete_multipart_upload(**kwargs)

    def abort_multipart_upload(self, **kwargs: Any) -> dict[str, Any]:
        return self.client_for(kwargs.get("Bucket")).abort_multipart_upload(**kwargs)
