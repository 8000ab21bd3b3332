"""blobgc.dag_kit.connections: the Airflow connections reach libpq, botocore and Redis as the providers' hooks read them."""
from __future__ import annotations

import json
import re

import psycopg
import pytest
import redis as redis_lib
from botocore.exceptions import ClientError
from airflow.providers.postgres.hooks.postgres import PostgresHook
from psycopg.conninfo import conninfo_to_dict
from redis.cluster import RedisCluster

from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit import connections
from blobgc.dag_kit.connections import client_config, pg_connection, pg_conninfo, pg_connector, redis_client

EXTRAS = {"sslmode": "require", "sslcert": "/etc/blobgc/client.crt", "sslkey": "/etc/blobgc/client.key",
          "sslrootcert": "/etc/blobgc/ca.crt", "sslcrl": "/etc/blobgc/ca.crl", "options": "-c statement_timeout=5000",
          "client_encoding": "UTF8", "keepalives": 1, "keepalives_idle": 30, "target_session_attrs": "read-write"}


def use_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **connection) -> str:
    """Define Airflow connection `conn_id` (an AIRFLOW_CONN_* variable, JSON) for this test."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    return conn_id


def postgres_fields(test_dsn: str) -> dict:
    """The test database as a postgres connection's fields."""
    parts = conninfo_to_dict(test_dsn)
    return {"conn_type": "postgres", "host": parts["host"], "port": int(parts["port"]), "login": parts.get("user"),
            "schema": parts["dbname"]}


def test_every_libpq_extra_of_the_postgres_connection_reaches_libpq(test_dsn, monkeypatch):
    """sslmode, client certificates, options...: what the connection's extra says, libpq gets (issue 18)."""
    fields = postgres_fields(test_dsn)
    conn_id = use_connection(monkeypatch, "blobgc_extras", **fields, extra={**EXTRAS, "cursor": "dictcursor"})
    assert conninfo_to_dict(pg_conninfo(conn_id)) == {
        "host": fields["host"], "port": str(fields["port"]), "user": fields["login"], "dbname": fields["schema"],
        **{k: str(v) for k, v in EXTRAS.items()}, "application_name": "blobgc"}  # the hook's `cursor` is not libpq's
    # libpq itself acts on them: the local server has no TLS, so sslmode=require is refused by libpq
    use_connection(monkeypatch, "blobgc_tls_required", **fields, extra={"sslmode": "require"})
    with pytest.raises(psycopg.OperationalError, match="SSL"):
        with pg_connection("blobgc_tls_required"):
            pass
    use_connection(monkeypatch, "blobgc_on_call", **fields, extra={
        "options": "-c statement_timeout=4321", "application_name": "on-call", "cursor": "dictcursor"})
    with pg_connection("blobgc_on_call") as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "4321ms"
        assert conn.execute("SELECT current_setting('application_name')").fetchone()[0] == "on-call"
        assert conn.execute("SELECT 1 AS one").fetchone() == (1,)  # `cursor` (a psycopg2 cursor factory) ignored
        assert conn.autocommit


def test_blobgc_connects_with_the_parameters_postgres_hook_get_conn_connects_with(test_dsn, monkeypatch):
    """Same fields, same extras, extras winning over fields as in the hook (a multi-host `host`, say); only
    `cursor` (the hook's row factory) and blobgc's default application_name differ."""
    fields = postgres_fields(test_dsn)
    extra = {**EXTRAS, "host": f"{fields['host']},{fields['host']}", "port": f"{fields['port']},{fields['port']}",
             "cursor": "namedtuplecursor", "sqlalchemy_scheme": "postgresql+psycopg"}
    conn_id = use_connection(monkeypatch, "blobgc_as_the_hook", **fields, password="s3cret", extra=extra)
    seen: dict = {}
    monkeypatch.setattr(PostgresHook, "_create_connection", lambda self, conn_args: seen.update(conn_args))
    PostgresHook(postgres_conn_id=conn_id).get_conn()
    hooks = {k: str(v) for k, v in seen.items() if k != "row_factory"}
    assert conninfo_to_dict(pg_conninfo(conn_id)) == {**hooks, "application_name": "blobgc"}
    assert hooks["host"] == extra["host"] and hooks["password"] == "s3cret"


def test_iam_authentication_gets_its_token_from_the_hooks_get_iam_token(monkeypatch):
    """`iam: true` with `aws_conn_id`: the password libpq gets is an RDS auth token signed with that connection's keys."""
    use_connection(monkeypatch, "blobgc_test_aws", conn_type="aws", login="AKIDBLOBGCTEST", password="not-a-secret",
                   extra={"region_name": "eu-west-1"})
    conn_id = use_connection(monkeypatch, "blobgc_iam", conn_type="postgres", host="db.example.com", login="gc",
                             schema="app", extra={"iam": True, "aws_conn_id": "blobgc_test_aws", "sslmode": "require"})
    params = conninfo_to_dict(pg_conninfo(conn_id))
    token = params.pop("password")
    assert token.startswith("db.example.com:5432/?Action=connect&DBUser=gc&")
    assert "X-Amz-Credential=AKIDBLOBGCTEST%2F" in token and "%2Feu-west-1%2Frds-db%2F" in token
    assert params == {"host": "db.example.com", "port": "5432", "user": "gc", "dbname": "app", "sslmode": "require",
                      "application_name": "blobgc"}


def test_each_connection_of_an_iam_connector_gets_a_fresh_token(monkeypatch):
    """A token lives 15 minutes: pg_connector asks the hook for one per connection, not once for all."""
    tokens = iter(f"token-{i}" for i in range(10))
    monkeypatch.setattr(PostgresHook, "get_iam_token", lambda self, conn: (conn.login, next(tokens), 5432))
    opened: list[str] = []
    monkeypatch.setattr(connections, "pg_connect", lambda conninfo: opened.append(conninfo_to_dict(conninfo)["password"]))
    conn_id = use_connection(monkeypatch, "blobgc_iam_connector", conn_type="postgres", host="db.example.com",
                             login="gc", extra={"iam": True})
    connect = pg_connector(conn_id)
    connect()
    connect()
    assert opened == ["token-1", "token-2"]  # token-0 was the connector's own check of the connection


def test_an_extra_neither_libpq_nor_the_hook_knows_is_refused_naming_it(monkeypatch):
    """A misspelt `sslmode` would otherwise connect without TLS: libpq would refuse it too, less clearly."""
    conn_id = use_connection(monkeypatch, "blobgc_typo", conn_type="postgres", host="db.example.com",
                             extra={"sslmod": "require"})
    with pytest.raises(ConfigurationError, match="has sslmod: neither a libpq keyword"):
        pg_conninfo(conn_id)


def test_the_connections_config_kwargs_win_over_blobgcs_defaults_and_bad_ones_are_refused():
    config = client_config({"config_kwargs": {"retries": {"max_attempts": 7, "mode": "standard"},
                                              "connect_timeout": 2}})
    assert (config.retries, config.connect_timeout) == ({"max_attempts": 7, "mode": "standard"}, 2)
    assert config.request_checksum_calculation == "when_required"  # blobgc's default where the connection is silent
    # blobgc's: 4 retries, in botocore's adaptive mode (a throttled client slows its own sending)
    assert client_config({}).retries == {"mode": "adaptive", "total_max_attempts": 5}
    with pytest.raises(ConfigurationError, match="not botocore Config options"):
        client_config({"config_kwargs": {"no_such_option": 1}})
    with pytest.raises(ConfigurationError, match="must be a JSON object"):
        client_config({"config_kwargs": "retries=3"})


def test_a_standalone_redis_connection_gives_a_plain_redis_client(monkeypatch):
    """Through RedisHook: host, port, password and `db` from the connection, no cluster."""
    conn_id = use_connection(monkeypatch, "blobgc_redis_standalone", conn_type="redis", host="127.0.0.1", port=6390,
                             password="pw", extra={"db": 3})
    client = redis_client(conn_id)
    assert type(client) is redis_lib.Redis
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["password"], kwargs["db"]) == ("127.0.0.1", 6390, "pw", 3)


def test_a_cluster_redis_connection_gives_a_cluster_client_that_purges_keys_across_slots(conn, tmp_path,
                                                                                         monkeypatch):
    """`cluster: true` (RedisHook's own extra, bootstrap nodes in `startup_nodes`): a RedisCluster, and the cache
    purge through it unlinks keys of every slot on every node."""
    from blobgc.core.cache_purge import owe_cache_purge, purge_owed_cache_keys
    from blobgc.core.runs import RunRef, ensure_run
    from tests.helpers import NOW
    from tests.support.redis_cluster import redis_cluster

    keys = [f"paste-{i}" for i in range(1500)]
    with redis_cluster(tmp_path) as cluster:
        first, *others = sorted(node.port for node in cluster.get_nodes())
        conn_id = use_connection(monkeypatch, "blobgc_redis_cluster", conn_type="redis", host="127.0.0.1", port=first,
                                 extra={"cluster": True, "startup_nodes": ",".join(f"127.0.0.1:{p}" for p in others)})
        client = redis_client(conn_id)
        assert isinstance(client, RedisCluster)
        for key in keys:
            client.set(key, b"cached")
        assert len({client.get_node_from_key(key).port for key in keys}) == 3  # the keys span all three nodes
        run = ensure_run(conn, RunRef("blobgc_paste_expiry", "cluster-connection"), NOW)
        with conn.transaction():
            owe_cache_purge(conn, run, keys[:1000])
            owe_cache_purge(conn, run, keys[1000:])
        purged = purge_owed_cache_keys(conn, client, run)
        assert (purged.keys_purged, purged.keys_found) == (1500, 1500)
        assert not any(cluster.exists(key) for key in keys)
        client.close()
    assert conn.execute("SELECT count(*) FROM blobgc.cache_purge").fetchone()[0] == 0


def test_s3_by_bucket_is_an_object_store_that_sends_each_call_to_its_buckets_client(s3, bucket):
    """Each of the seven calls blobgc makes of a store (blobgc.core.objects.ObjectStore) goes to the client of its
    Bucket's connection; a bucket of no collection, and a call without one, to the default client."""
    from blobgc.core.objects import ObjectStore
    from blobgc.dag_kit.connections import StoreByBucket

    class Recording:
        def __init__(self, name: str) -> None:
            self.name, self.calls = name, []

        def __getattr__(self, operation: str):
            def call(*args, **kwargs):
                self.calls.append((operation, kwargs.get("Bucket")))
                return getattr(s3, operation)(*args, **kwargs)
            return call

    default, own = Recording("default"), Recording("own")
    store: ObjectStore = StoreByBucket(default, {bucket: own})
    store.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert store.head_object(Bucket=bucket, Key="k")["ContentLength"] == 1
    assert store.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"
    assert [o["Key"] for o in store.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]
    assert [o["Key"] for page in store.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page["Contents"]] == ["k"]
    store.get_bucket_versioning(Bucket=bucket)
    store.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k"}]})
    assert [op for op, _ in own.calls] == ["put_object", "head_object", "get_object", "list_objects_v2",
                                           "get_paginator", "get_bucket_versioning", "delete_objects"]
    assert default.calls == []
    with pytest.raises(ClientError):  # no such bucket: the call went to the default client
        store.head_object(Bucket=f"{bucket}-elsewhere", Key="k")
    assert default.calls == [("head_object", f"{bucket}-elsewhere")]


def test_store_client_picks_the_store_by_the_connections_type_and_names_what_it_knows(monkeypatch):
    """Issue 33: a connection of type aws is S3, google_cloud_platform GCS, wasb Azure Blob Storage; another type is
    refused naming the three."""
    from blobgc.core.stores.azure import AzureStore
    from blobgc.core.stores.gcs import GcsStore
    from blobgc.dag_kit.connections import store_client

    assert type(store_client("blobgc_s3")).__name__ == "S3"  # botocore's client class
    assert isinstance(store_client("blobgc_gcs"), GcsStore)
    assert isinstance(store_client("blobgc_azure"), AzureStore)
    use_connection(monkeypatch, "blobgc_ftp", conn_type="ftp", host="example.com")
    with pytest.raises(ConfigurationError) as refused:
        store_client("blobgc_ftp")
    assert str(refused.value) == (
        "connection 'blobgc_ftp' is of type 'ftp', which names no object store blobgc knows: give it one of "
        "aws (S3), google_cloud_platform (Google Cloud Storage), wasb (Azure Blob Storage)")


def test_store_client_names_the_extra_to_install_when_a_stores_provider_is_missing(monkeypatch):
    """The base install is S3-only: a google_cloud_platform connection without the Google provider says to install
    blobgc[gcs] (and wasb, blobgc[azure]), rather than failing on an import deep in a task."""
    import sys

    from blobgc.dag_kit.connections import store_client

    for module, conn_id, extra in (("airflow.providers.google.cloud.hooks.gcs", "blobgc_gcs", "blobgc[gcs]"),
                                   ("airflow.providers.microsoft.azure.hooks.wasb", "blobgc_azure", "blobgc[azure]")):
        monkeypatch.setitem(sys.modules, module, None)  # as if the provider were not installed
        monkeypatch.delitem(sys.modules, f"blobgc.dag_kit.store_{conn_id.removeprefix('blobgc_')}", raising=False)
        with pytest.raises(ConfigurationError, match=rf"whose provider is not installed .*: install {re.escape(extra)}"):
            store_client(conn_id)


def test_stores_by_bucket_routes_each_bucket_to_its_connections_store(monkeypatch, tmp_path, s3, bucket):
    """A collection's conn_id and Variable blobgc_bucket_connections (the seed kinds' buckets) each send their
    bucket's calls to that connection's store; other buckets stay on blobgc_s3; one bucket named with two
    connections fails, naming both."""
    from blobgc.core.stores.gcs import GcsStore
    from blobgc.dag_kit.collections import stores_by_bucket
    from blobgc.dag_kit.connections import StoreByBucket

    path = tmp_path / "collections.yaml"
    path.write_text("collections:\n  pics:\n    table: s.pics\n    id: id\n    bucket: pics-gcs\n"
                    "    conn_id: blobgc_gcs\n    keys: ['p/{id}']\n")
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET_CONNECTIONS", json.dumps({"kinds-azure": "blobgc_azure"}))
    store = stores_by_bucket(s3)
    assert isinstance(store, StoreByBucket) and stores_by_bucket(store) is store
    assert isinstance(store.client_for("pics-gcs"), GcsStore)
    assert type(store.client_for("kinds-azure")).__name__ == "AzureStore"
    assert store.client_for(bucket) is s3 and store.client_for(None) is s3

    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET_CONNECTIONS", json.dumps({"pics-gcs": "blobgc_azure"}))
    with pytest.raises(ConfigurationError, match="bucket 'pics-gcs' is reached through 'blobgc_gcs' by collection "
                                                 "'pics' and through 'blobgc_azure' by Variable "
                                                 "blobgc_bucket_connections; one bucket name has one connection"):
        stores_by_bucket(s3)
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET_CONNECTIONS", '["blobgc_gcs"]')
    with pytest.raises(ConfigurationError, match="Variable blobgc_bucket_connections must be a JSON object"):
        stores_by_bucket(s3)


def test_stores_by_bucket_the_seed_kinds_bucket_is_blobgc_s3s_unless_the_variable_names_another(monkeypatch,
                                                                                                 tmp_path, s3):
    """A collection that names no bucket keeps its objects in Variable blobgc_bucket's, which blobgc's own kinds use
    through blobgc_s3: naming another connection for it is refused, unless Variable blobgc_bucket_connections moves
    that bucket to the same connection (then the kinds' objects are there too)."""
    from blobgc.core.stores.gcs import GcsStore
    from blobgc.dag_kit.collections import stores_by_bucket

    path = tmp_path / "collections.yaml"
    path.write_text("collections:\n  pics:\n    table: s.pics\n    id: id\n    conn_id: blobgc_gcs\n"
                    "    keys: ['p/{id}']\n")
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET", "seed-bucket")
    with pytest.raises(ConfigurationError, match="bucket 'seed-bucket' is reached through 'blobgc_gcs' by collection "
                                                 "'pics' and through 'blobgc_s3' by blobgc's own kinds"):
        stores_by_bucket(s3)
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET_CONNECTIONS", json.dumps({"seed-bucket": "blobgc_gcs"}))
    assert isinstance(stores_by_bucket(s3).client_for("seed-bucket"), GcsStore)


def test_stores_by_bucket_with_the_collections_file_unusable_refuses_buckets_of_unknown_store(monkeypatch, tmp_path,
                                                                                             s3):
    """With the file unusable, a collection's bucket might be another store's: it is refused (StoreUnknown), never
    sent to blobgc_s3, where a bucket of the same name could answer that its objects are gone. The kinds' buckets and
    the Variable's stay reachable."""
    from blobgc.core.objects import StoreUnknown
    from blobgc.dag_kit.collections import stores_by_bucket

    path = tmp_path / "collections.yaml"
    path.write_text("collections: [")
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET", "seed-bucket")
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET_CONNECTIONS", json.dumps({"az-bucket": "blobgc_azure"}))
    store = stores_by_bucket(s3)
    assert store.client_for("seed-bucket") is s3 and store.client_for("fakebook-images") is s3
    assert type(store.client_for("az-bucket")).__name__ == "AzureStore"
    with pytest.raises(StoreUnknown, match="bucket 'elsewhere': its store is unknown, because the collections file "
                                           "is unusable"):
        store.head_object(Bucket="elsewhere", Key="k")
