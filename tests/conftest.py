"""Shared fixtures: the real local stack (`make up`), with a database and buckets of the tests' own.

The tests never touch the demo's data: they migrate a fresh `blobgc_test` database on the same
PostgreSQL server and create a bucket per test on the same S3 server. A missing stack fails
loudly; nothing is skipped. Helpers that are not fixtures live in tests/helpers.py.
"""
from __future__ import annotations

import json
import os
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import blobgc.kinds  # noqa: F401 - installs the kinds, as every DAG and the reclaim app do
from blobgc.core.clients import pg_connect, redis_from_env, s3_client_from_env
from blobgc.core.migrations import apply_migrations
from demo_app.migrate import apply_app_migrations
from tests.support.replica import replica, replica_dsn  # noqa: F401 - the stale replica's fixtures
from tests.helpers import TEST_DB

# fixtures of the seeds' test kits (tests/support/), shared by the tests of a collector, its DAG and its app
pytest_plugins = ["tests.support.images", "tests.support.media"]

# What each test starts from: the tables below emptied, and every sequence of the test database back at 1. Only the
# tables with a row are truncated (with what references them): TRUNCATE makes new files for each table and its
# indexes, about 80 ms for all of them, and most tests fill a few; `setval` starts a sequence again in place.
RESET_TABLES = """
app.blob_attachment, app.page_using_blob, app.post, app.blob, app.paste, app.content, app.crawl_request, app.image,
app.offer, blobgc.outbox, blobgc.deletion_log, blobgc.cache_purge, blobgc.crawl_item, blobgc.image_file,
blobgc.reconcile_checkpoint, blobgc.reconcile_finding, blobgc.generation_opened, blobgc.generation_collection,
blobgc.restore_item, blobgc.run_part, blobgc.run_collection, blobgc.plan_item, blobgc.plan_outcome, blobgc.gate_decision,
blobgc.undo_request, blobgc.quarantine, blobgc.deletion_settlement, blobgc.reconcile_sighting, blobgc.reconcile_pass,
gen.deletion, gen.reference, gen.blob, gen.generation, blobgc.run
"""
RESET = """
DO $$
DECLARE
    tables regclass[] := '{%s}';
    filled text[] := '{}';
    name regclass;
    has_rows boolean;
BEGIN
    FOREACH name IN ARRAY tables LOOP
        EXECUTE format('SELECT EXISTS (SELECT FROM %%s)', name) INTO has_rows;
        IF has_rows THEN
            filled := filled || name::text;
        END IF;
    END LOOP;
    IF cardinality(filled) > 0 THEN
        EXECUTE 'TRUNCATE ' || array_to_string(filled, ', ') || ' CASCADE';
    END IF;
    PERFORM setval(d.objid::regclass, 1, false)  -- the tables' serial and identity columns' sequences
       FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
      WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
        AND d.refobjid = ANY (tables);
END
$$
""" % ",".join(name.strip() for name in RESET_TABLES.split(","))


# `make test` runs the suite on four pytest-xdist workers. Each has a test database of its own (tests.helpers.TEST_DB),
# its own buckets and Redis prefixes, and takes a DAG's lock (tests.helpers.dag_lock) to run it. The tests of each
# group below share more: they run on one worker, one after the other, first (they are the longest), file by file in
# the order given. The Celery test holds blobgc_reconcile's and blobgc_image_cleanup's locks for a minute or two: it
# comes last in its group, and the gate test (which runs both DAGs) first in its own, so that they rarely meet.
SHARED = {
    # the stack's own database, `blobgc` bucket and scheduler: the scheduler restarts on Celery in test_celery
    # and its pools: a test deletes blobgc_s3 for a while (holding every DAG's lock), another expects it (first here,
    # before the tests that hold a DAG's lock for minutes while the scheduler runs it)
    # and blobgc.reclaim_daily, which the reclaim app's tests compare whole with what the api-server served a moment
    # before (the Celery test's runs and those tests' own rows would change it in between)
    "stack": ("tests/dag_kit/test_pools.py", "tests/dags/test_operations.py", "tests/reclaim/test_receipts.py",
              "tests/reclaim/test_app.py", "tests/deploy/test_celery.py"),
    # one virtualenv with the wheel installed, built in the background from the start (below)
    "install": ("tests/deploy/test_install.py",),
    # Redis list media-thumb-queue, the queue of the application's thumbnail workers (docs/reference.md §3),
    # which blobgc_media_thumbnails drains (test_gate_enforced runs it too)
    "media": ("tests/dags/test_gate_enforced.py", "tests/kinds/media/test_cleanup.py",
              "tests/dags/test_blobgc_media.py", "tests/demo_app/test_media.py"),
}


def shared_group(nodeid: str) -> str | None:
    return next((group for group, files in SHARED.items() if nodeid.split("::")[0] in files), None)


def pytest_xdist_make_scheduler(config, log):
    """Tests are sent to the workers one by one, but a SHARED group's tests all to one worker."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return shared_group(nodeid) or nodeid

    return SharedGroups(config, log)


def pytest_collection_finish(session):
    """The install test's virtualenv takes a minute of pip: build it while the rest of the suite runs (on the first
    worker; another worker that runs the install tests waits for that build, then reinstalls the wheel)."""
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return
    if any(shared_group(item.nodeid) == "install" for item in session.items):
        from tests.support.install import start_building

        start_building()


def pytest_collection_modifyitems(items):
    """A test that needs the running stack (directly or through a fixture) is an integration test. On xdist
    workers, the SHARED groups come first: the longest work starts first, and the rest fills in around it."""
    for item in items:
        if "stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        order = list(SHARED)

        def place(item) -> tuple[int, int]:
            group = shared_group(item.nodeid)
            if group is None:
                return len(order), 0
            return order.index(group), SHARED[group].index(item.nodeid.split("::")[0])

        items.sort(key=place)


def cpu_seconds() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With BLOBGC_TEST_TIMELINE=<file>, each test's worker, start and end (wall clock) are appended to the file as
    a JSON line, with the CPU seconds of the worker and of the processes it waited for meanwhile (an `airflow` CLI
    command's, not the stack's) and the seconds it waited for other workers' DAG locks (tests.helpers.dag_lock):
    which tests make the suite's tail, its CPU, and its waiting (keeping `make test` under 12 minutes on 2 cores)."""
    from tests.helpers import LOCK_WAITS

    path = os.environ.get("BLOBGC_TEST_TIMELINE")
    started, cpu, waited = time.time(), cpu_seconds(), LOCK_WAITS["seconds"]
    yield
    if path:
        line = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "gw0"), "test": item.nodeid, "start": started,
                "end": time.time(), "cpu": round(cpu_seconds() - cpu, 2),
                "locks": round(LOCK_WAITS["seconds"] - waited, 2)}
        with open(path, "a") as out:
            out.write(json.dumps(line) + "\n")


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
        apply_app_migrations(conn)
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


def own_bucket(s3, prefix: str):
    """A bucket of the test's own, emptied and removed afterwards."""
    name = f"{prefix}{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def bucket(s3):
    yield from own_bucket(s3, "test-")


@pytest.fixture
def reports(s3):
    """A bucket for S3 Inventory reports (written by blobgc.inventory)."""
    yield from own_bucket(s3, "test-inv-")


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
