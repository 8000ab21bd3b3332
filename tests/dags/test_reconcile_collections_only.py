"""blobgc_reconcile on a user's own setup (issue 30): a database without any seed table and a collections file whose
every collection names its own bucket. The bucket of Variable blobgc_bucket does not exist, and is never listed."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from blobgc.core.clients import pg_connect
from blobgc.core.migrations import apply_migrations
from tests.helpers import object_keys, run_dag
from tests.support.collections import add_upload, create_shop, new_schema, shop_yaml, write_collections
from tests.support.reconcile import DAG, age, put, sha


@pytest.fixture
def database_without_seeds(stack):
    """A database of the test's own with blobgc's schema and no seed table (no app, no gen); dropped afterwards."""
    name = f"blobgc_scratch_{uuid.uuid4().hex[:12]}"
    admin = make_conninfo(stack["BLOBGC_PG_DSN"], dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(stack["BLOBGC_PG_DSN"], dbname=name)
    with pg_connect(dsn) as conn:
        apply_migrations(conn)
    yield dsn
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_collections_only_reconcile_lists_only_the_collections_buckets(database_without_seeds, s3, bucket, tmp_path):
    dsn, schema = database_without_seeds, new_schema()
    parts = conninfo_to_dict(dsn)
    absent = f"absent-{uuid.uuid4().hex[:12]}"  # Variable blobgc_bucket's bucket: it does not exist
    with pg_connect(dsn) as conn:
        create_shop(conn, schema)
        live = add_upload(conn, s3, schema, bucket, 1, b"live")
        put(s3, bucket, f"uploads/{sha('no row')}.png")
        age(s3, bucket)
        result = run_dag(DAG, conf={"min_age_hours": 1, "confirmations": 1},
                         env_extra={"BLOBGC_COLLECTIONS": str(write_collections(tmp_path, shop_yaml(schema, bucket))),
                                    "AIRFLOW_VAR_BLOBGC_BUCKET": absent, "BLOBGC_TASK_RETRIES": "0",
                                    "AIRFLOW_CONN_BLOBGC_POSTGRES":
                                        f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"})
        assert result.returncode == 0, result.output[-3000:]  # listing the absent bucket would have failed it
        assert object_keys(s3, bucket) == {live["key"], live["thumb"]}  # the orphan went; the row's keys stay
        (details,) = conn.execute("SELECT details FROM blobgc.run WHERE dag_id = %s AND run_id = %s",
                                  (DAG, result.run_id)).fetchone()
    assert details["not_planned"] == {"shop_uploads": {"considered": 3, "accounted": 2, "too_young": 0,
                                                       "first_eligible_at": None, "planned": 1, "unknown": 0,
                                                       "waiting": 0}}
