"""Errors no retry can fix fail the task at once (AirflowFailException: Airflow does not retry it), each naming the
thing and what to do: a missing grant, a missing table, a missing bucket with what points at it, a bucket that
refuses blobgc, a bad Variable. A transient S3 failure is still raised as it is, for Airflow to retry."""
from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest
from airflow.sdk.exceptions import AirflowFailException
from botocore.exceptions import ClientError
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from blobgc.core.clients import pg_connect
from blobgc.core.outbox import DrainPolicy, delete_owed_objects, owed_summary, record_deletions
from blobgc.core.refusals import BucketAccessDenied, MissingBucket, check_buckets
from blobgc.core.runs import RunRef, ensure_run
from blobgc.dag_kit.steps import failing_fast
from blobgc.dag_kit.unfixable import drain_refusal
from blobgc.dag_kit.variables import blob_bucket
from tests.helpers import NOW, TEST_DB, run_dag, s3_outage
from tests.support.collections import create_shop, new_schema, shop_yaml, write_collections


@pytest.fixture
def grantless_role(test_dsn, monkeypatch):
    """A login role with USAGE on schema app and nothing else, which connection blobgc_postgres logs in as;
    returns a connection of it."""
    role = f"blobgc_nogrant_{uuid.uuid4().hex[:8]}"
    with pg_connect(test_dsn) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA app TO {role}")
    parts = conninfo_to_dict(test_dsn)
    monkeypatch.setenv("AIRFLOW_CONN_BLOBGC_POSTGRES", f"postgresql://{role}@{parts['host']}:{parts['port']}/{TEST_DB}")
    connection = pg_connect(make_conninfo(test_dsn, user=role))
    yield role, connection
    connection.close()
    with pg_connect(test_dsn) as admin:
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")


def failure_of(action) -> AirflowFailException:
    """The AirflowFailException (the failure Airflow does not retry) that `action`, run in a task's guard, ends in."""
    with pytest.raises(AirflowFailException) as failed, failing_fast():
        action()
    return failed.value


def test_a_missing_table_grant_fails_at_once_naming_the_grant(conn, grantless_role):
    role, restricted = grantless_role
    failure = failure_of(lambda: restricted.execute("SELECT id FROM app.blob FOR UPDATE"))
    assert isinstance(failure.__cause__, psycopg.errors.InsufficientPrivilege)
    assert str(failure).startswith(f"permission denied for table blob: role {role} lacks a privilege on table "
                                   "app.blob. No retry can fix this"), str(failure)
    assert str(failure).endswith(f"GRANT SELECT, UPDATE, DELETE ON app.blob TO {role};"), str(failure)


def test_a_missing_schema_grant_fails_at_once_naming_the_grant(conn, grantless_role):
    role, restricted = grantless_role
    failure = failure_of(lambda: restricted.execute("SELECT count(*) FROM blobgc.run"))
    assert isinstance(failure.__cause__, psycopg.errors.InsufficientPrivilege)
    assert str(failure).startswith(f"permission denied for schema blobgc: role {role} may not use schema blobgc."), \
        str(failure)
    assert str(failure).endswith(f"GRANT USAGE, CREATE ON SCHEMA blobgc TO {role};"), str(failure)


def test_a_missing_table_fails_at_once_naming_it_and_the_collection_that_needs_it(conn, tmp_path, monkeypatch):
    schema = new_schema()
    create_shop(conn, schema)
    path = write_collections(tmp_path, shop_yaml(schema, "test-bucket"))
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    with conn.transaction():
        conn.execute(f"DROP TABLE {schema}.upload CASCADE")  # the application dropped it after the file was written
    failure = failure_of(lambda: conn.execute(f"SELECT id FROM {schema}.upload"))
    assert isinstance(failure.__cause__, psycopg.errors.UndefinedTable)
    assert str(failure) == (
        f"table {schema}.upload does not exist in the database of connection blobgc_postgres, which collection "
        f"'shop_uploads' of collections file {path} needs. No retry can fix this: create it, or correct what names "
        "it (a collection's `table` or `references` queries), or pause the DAG that needs it.")


def test_a_missing_bucket_fails_at_once_naming_it_and_the_variable_that_points_at_it(s3, tmp_path, monkeypatch):
    missing = f"absent-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET", missing)
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(write_collections(tmp_path, shop_yaml(new_schema(), "shop-media"))))
    failure = failure_of(lambda: s3.list_objects_v2(Bucket=missing))
    assert isinstance(failure.__cause__, ClientError)
    assert str(failure) == (f"bucket '{missing}' (Variable blobgc_bucket) does not exist (the store answered "
                            "NoSuchBucket to ListObjectsV2): create it, or set Variable blobgc_bucket to the bucket "
                            "that holds the objects. No retry can fix this, so the task fails at once.")


def test_a_drain_names_a_missing_bucket_and_the_collection_that_points_at_it(conn, s3, tmp_path, monkeypatch):
    """The drain knows the bucket of each owed key: a whole call refused with NoSuchBucket leaves the keys owed, and
    the DAG's last drain step raises the refusal (a ConfigurationError: no retries) naming bucket and collection."""
    missing, schema = f"absent-{uuid.uuid4().hex[:12]}", new_schema()
    create_shop(conn, schema)
    path = write_collections(tmp_path, shop_yaml(schema, missing))
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET", "blobgc")
    run = ensure_run(conn, RunRef("blobgc_sweep", "missing-bucket"), NOW)
    with conn.transaction():
        record_deletions(conn, run, source="collection:shop_uploads", bucket=missing, keys=["uploads/a.png"],
                         sizes=[5])
    result = delete_owed_objects(conn, s3, run, policy=DrainPolicy(backoff_base=timedelta(0)))
    assert owed_summary(conn, "blobgc_sweep")[0] == 1  # still owed
    refusal = drain_refusal(result)
    assert isinstance(refusal, MissingBucket)
    assert str(refusal).startswith(f"bucket '{missing}' (collection 'shop_uploads', collections file {path}) does "
                                   "not exist (the store answered NoSuchBucket to "), str(refusal)
    assert (f"create it, or set the `bucket` of collection 'shop_uploads' in collections file {path} to the bucket "
            "that holds the objects") in str(refusal)


def test_the_sweeps_first_task_names_a_collections_missing_bucket_before_it_plans(conn, s3, tmp_path):
    """plan_shards probes each selected collection's bucket (one listing call of one key): a missing one fails a
    dry run's first task, once, naming the bucket and the collection that points at it, and nothing is planned."""
    missing, schema = f"absent-{uuid.uuid4().hex[:12]}", new_schema()
    create_shop(conn, schema)
    path = write_collections(tmp_path, shop_yaml(schema, missing))
    result = run_dag("blobgc_sweep", conf={"dry_run": True},
                     env_extra={"BLOBGC_COLLECTIONS": str(path), "BLOBGC_TASK_RETRIES": "3"})
    assert result.returncode == 1 and result.task_states["plan_shards"] == "failed", result.task_states
    assert (f"bucket '{missing}' (collection 'shop_uploads', collections file {path}) does not exist (the store "
            "answered NoSuchBucket to ListObjectsV2)") in result.output, result.output[-3000:]
    assert conn.execute("SELECT count(*) FROM blobgc.plan_item").fetchone()[0] == 0


def test_a_bucket_the_credentials_may_not_list_is_left_to_the_drain_by_the_sweeps_probe(tmp_path, monkeypatch,
                                                                                        caplog):
    """The sweep only deletes: credentials may hold s3:DeleteObject without s3:ListBucket. Its probe then warns and
    goes on (the drain names any deletion the store refuses); a step that lists fails at once."""
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                          "ResponseMetadata": {"HTTPStatusCode": 403}}, "ListObjectsV2")

    class NoListing:
        def list_objects_v2(self, **_kwargs):
            raise denied

    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(write_collections(tmp_path, shop_yaml(new_schema(), "shop-media"))))
    origins = {"shop-media": ["collection 'shop_uploads'"]}
    check_buckets(NoListing(), origins, listing_needed=False)
    assert "bucket 'shop-media' could not be probed" in caplog.text
    with pytest.raises(BucketAccessDenied):
        check_buckets(NoListing(), origins)


def test_access_denied_on_a_bucket_fails_at_once_naming_the_action_to_grant(tmp_path, monkeypatch):
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied", "BucketName": "shop-media"},
                          "ResponseMetadata": {"HTTPStatusCode": 403}}, "ListObjectsV2")

    def list_bucket() -> None:
        raise denied

    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET", "shop-media")
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(write_collections(tmp_path, shop_yaml(new_schema(), "other"))))
    failure = failure_of(list_bucket)
    assert str(failure) == ("access denied to bucket 'shop-media' (Variable blobgc_bucket): the store refused "
                            "ListObjectsV2 (AccessDenied). Grant the credentials of blobgc's S3 connection "
                            "s3:ListBucket on arn:aws:s3:::shop-media (or lift the bucket policy's Deny). No retry "
                            "can fix this, so the task fails at once.")


def test_a_transient_s3_failure_is_raised_as_it_is_for_airflow_to_retry(s3, bucket):
    s3_outage(bucket, True)
    try:
        with pytest.raises(ClientError) as raised, failing_fast():
            s3.list_objects_v2(Bucket=bucket)
    finally:
        s3_outage(bucket, False)
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503


def test_a_bucket_variable_that_is_no_bucket_name_fails_at_once_naming_it(monkeypatch):
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET", '"blobgc"')  # JSON-quoted: S3 would refuse the name
    failure = failure_of(blob_bucket)
    assert str(failure) == ("Variable blobgc_bucket is '\"blobgc\"', not a bucket name: letters, digits, dots, "
                            "hyphens and underscores, without quotes (e.g. blobgc)")


def test_a_legacy_bucket_name_with_capitals_and_underscores_is_still_a_bucket_name(monkeypatch):
    """Buckets made before S3's current naming rule (and some S3-compatible stores' names) hold capitals and
    underscores: blobgc must keep reaching them."""
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_BUCKET", "Legacy_Media.2014")
    assert blob_bucket() == "Legacy_Media.2014"
