"""Integration fixtures: the real local stack (`make up`), with a database and buckets of the tests' own.

The tests never touch the demo's data: they migrate a fresh `blobgc_test` database on the same
PostgreSQL server and create a bucket per test on the same S3 server. A missing stack fails
loudly; nothing is skipped.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from blobgc.clients import pg_connect, redis_from_env, s3_client_from_env
from blobgc.migrate import apply_migrations
from blobgc.sweep import blob_object_keys

ROOT = Path(__file__).resolve().parents[2]
TEST_DB = os.environ.get("BLOBGC_TEST_DB", "blobgc_test")  # a session of its own may use another
RESET = """
TRUNCATE app.blob_attachment, app.page_using_blob, app.post, app.blob, app.paste, app.content,
         app.crawl_request, app.image, app.offer,
         blobgc.outbox, blobgc.deletion_log, blobgc.cache_purge, blobgc.crawl_item, blobgc.image_file,
         blobgc.reconcile_checkpoint, blobgc.reconcile_finding, blobgc.generation_opened, blobgc.generation_collection, blobgc.restore_item,
         gen.deletion, gen.reference, gen.blob, gen.generation, blobgc.run
         RESTART IDENTITY CASCADE
"""


def pytest_collection_modifyitems(items):
    for item in items:
        if "integration" in item.nodeid:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def stack() -> dict[str, str]:
    missing = [v for v in ("BLOBGC_PG_DSN", "BLOBGC_S3_ENDPOINT", "BLOBGC_REDIS_URL", "AIRFLOW_HOME")
               if not os.environ.get(v)]
    if missing:
        pytest.fail(f"the local stack's environment is missing ({', '.join(missing)}): run `make test`, "
                    "or `make up && source .blobgc/env` first")
    try:
        with psycopg.connect(os.environ["BLOBGC_PG_DSN"], connect_timeout=5):
            pass
        s3_client_from_env().list_buckets()
        redis_from_env().ping()
    except Exception as error:  # noqa: BLE001 - any failure here means the stack is down
        pytest.fail(f"the local stack is not reachable ({error!r}): run `make up`")
    return dict(os.environ)


@pytest.fixture(scope="session")
def test_dsn(stack) -> str:
    """A freshly migrated database for the tests; the Airflow connection is pointed at it too."""
    admin = make_conninfo(stack["BLOBGC_PG_DSN"], dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEST_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{TEST_DB}"')
    dsn = make_conninfo(stack["BLOBGC_PG_DSN"], dbname=TEST_DB)
    with psycopg.connect(dsn) as conn:
        apply_migrations(conn)
    parts = conninfo_to_dict(dsn)
    os.environ["BLOBGC_PG_DSN"] = dsn
    os.environ["AIRFLOW_CONN_BLOBGC_POSTGRES"] = (
        f"postgresql://{parts.get('user', 'postgres')}@{parts['host']}:{parts['port']}/{TEST_DB}"
    )
    return dsn


@pytest.fixture
def conn(test_dsn):
    connection = pg_connect(test_dsn)
    connection.execute(RESET)
    yield connection
    connection.close()


@pytest.fixture
def other_conn(test_dsn):
    """A second, independent connection (another application writer)."""
    connection = pg_connect(test_dsn)
    yield connection
    connection.close()


@pytest.fixture
def s3(stack):
    return s3_client_from_env()


@pytest.fixture
def bucket(s3):
    name = f"test-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def versioned_bucket(s3):
    """A bucket of the test's own with versioning enabled (as docker-compose's MinIO buckets are)."""
    name = f"test-v-{uuid.uuid4().hex[:14]}"
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    yield name
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
        versions = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                    for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        if versions:
            s3.delete_objects(Bucket=name, Delete={"Objects": versions, "Quiet": True})
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def redis(stack):
    return redis_from_env()


@pytest.fixture
def redis_prefix(redis):
    """A key prefix of the test's own in the shared Redis (Variable blobgc_paste_redis_prefix in DAG runs)."""
    prefix = f"test-{uuid.uuid4().hex[:12]}:"
    yield prefix
    keys = list(redis.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        redis.delete(*keys)


def make_blobs(conn, s3, bucket: str, n: int, *, prefix: str = "b", size: int = 100,
               thumbnails: bool = True) -> list[str]:
    """Create `n` blobs the way the application does: objects first (in parallel), then the rows."""
    ids = [f"{prefix}{i:06d}" for i in range(n)]

    def put(blob_id: str) -> None:
        raw, thumb = blob_object_keys(blob_id)
        s3.put_object(Bucket=bucket, Key=raw, Body=b"r" * size)
        if thumbnails:
            s3.put_object(Bucket=bucket, Key=thumb, Body=b"t" * 10)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, ids))
    with conn.transaction():
        conn.execute(
            "INSERT INTO app.blob (id, filename, mimetype, size_bytes) "
            "SELECT id, id || '.bin', 'application/octet-stream', %(size)s FROM unnest(%(ids)s::text[]) id",
            {"ids": ids, "size": size},
        )
    return ids


def set_unused_since(conn, ids: list[str], age: str) -> None:
    """As if an earlier mark found these blobs unused `age` ago."""
    with conn.transaction():
        conn.execute("UPDATE app.blob SET unused = true, updated_at = now() - %(age)s::interval "
                     "WHERE id = ANY(%(ids)s::text[])", {"ids": ids, "age": age})


def object_keys(s3, bucket: str) -> set[str]:
    return {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])}


def cached_keys(redis, prefix: str) -> set[str]:
    return {k.decode() for k in redis.scan_iter(match=f"{prefix}*", count=1000)}


def airflow(*args: str, env_extra: dict[str, str] | None = None, timeout: int = 300,
            whole_dags_folder: bool = False) -> subprocess.CompletedProcess:
    """The `airflow` CLI against the stack. `dags test <dag_id>` parses only dags/<dag_id>.py (`-f`), which
    starts in about 6 s instead of 20 to 27 s for the whole folder, unless `whole_dags_folder`."""
    env = dict(os.environ)
    env.update(env_extra or {})
    argv = list(args)
    if argv[:2] == ["dags", "test"] and not whole_dags_folder and "-f" not in argv:
        argv += ["-f", str(ROOT / "dags" / f"{argv[2]}.py")]
    return subprocess.run(["airflow", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def backend_waiting_on_lock(conn, query_fragment: str) -> bool:
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        (f"%{query_fragment}%",),
    ).fetchone()[0] > 0


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


AIRFLOW_API = f"http://127.0.0.1:{os.environ.get('BLOBGC_AIRFLOW_PORT', '8080')}"


def airflow_token(username: str = "admin", password: str = "admin") -> str:
    """A JWT from the running api-server, as a BI tool or script gets one."""
    request = urllib.request.Request(AIRFLOW_API + "/auth/token", method="POST",
                                     data=json.dumps({"username": username, "password": password}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.load(r)["access_token"]


def airflow_api(path: str, *, method: str = "GET", body: dict | None = None, token: str | None = None) -> dict:
    """A call to the running api-server's public REST API (/api/v2/...), as admin."""
    request = urllib.request.Request(
        AIRFLOW_API + path, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token or airflow_token()}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.load(r)


def backdate_object(bucket: str, key: str, seconds: float) -> None:
    """Make an object old the honest way (CONTRACT §1): the local S3 server moves its LastModified into the past."""
    query = urllib.parse.urlencode({"bucket": bucket, "key": key, "seconds": seconds})
    request = urllib.request.Request(f"{os.environ['BLOBGC_S3_ENDPOINT']}/_blobgc/backdate?{query}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200


def backdate_objects(s3, bucket: str, seconds: float, prefix: str = "") -> list[str]:
    """Backdate every object under `prefix`; returns their keys."""
    keys = sorted(o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                  for o in page.get("Contents", []))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: backdate_object(bucket, key, seconds), keys))
    return keys


def s3_outage(bucket: str, down: bool) -> None:
    """The local S3 server's outage drill: every request on `bucket` answers 503 while it is down."""
    request = urllib.request.Request(f"{os.environ['BLOBGC_S3_ENDPOINT']}/_blobgc/outage?bucket={bucket}",
                                     method="PUT" if down else "DELETE")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200
