"""blobgc.core.objects: DeleteObjects in calls of at most 1000 keys, per-key errors, retries; sizes asked of the
store."""
from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from blobgc.core.objects import delete_objects_in_batches


@pytest.fixture
def moto_s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="unit-bucket")
        yield client


class CountingClient:
    """Wraps a real client, counting DeleteObjects calls and injecting per-key errors on chosen attempts."""

    def __init__(self, inner, errors_by_call: dict[int, dict[str, str]] | None = None, raise_on: dict | None = None):
        self.inner = inner
        self.calls: list[int] = []
        self.errors_by_call = errors_by_call or {}
        self.raise_on = raise_on or {}

    def delete_objects(self, Bucket, Delete):
        n = len(self.calls)
        self.calls.append(len(Delete["Objects"]))
        if n in self.raise_on:
            raise self.raise_on[n]
        failing = self.errors_by_call.get(n, {})
        keep = [o for o in Delete["Objects"] if o["Key"] not in failing]
        response = self.inner.delete_objects(Bucket=Bucket, Delete={"Objects": keep, "Quiet": True}) if keep else {}
        errors = list(response.get("Errors", []))
        errors += [{"Key": k, "Code": code, "Message": "injected"} for k, code in failing.items()
                   if any(o["Key"] == k for o in Delete["Objects"])]
        return {"Errors": errors} if errors else {}


def put(moto_s3, n: int) -> list[str]:
    keys = [f"k/{i:05d}" for i in range(n)]
    for k in keys:
        moto_s3.put_object(Bucket="unit-bucket", Key=k, Body=b"x")
    return keys


def remaining(moto_s3) -> set[str]:
    paginator = moto_s3.get_paginator("list_objects_v2")
    return {o["Key"] for page in paginator.paginate(Bucket="unit-bucket") for o in page.get("Contents", [])}


def test_1001_keys_take_two_calls_of_at_most_1000(moto_s3):
    keys = put(moto_s3, 1001)
    client = CountingClient(moto_s3)
    outcome = delete_objects_in_batches(client, "unit-bucket", keys)
    assert client.calls == [1000, 1]
    assert sorted(outcome.deleted) == keys and outcome.failed == {}
    assert remaining(moto_s3) == set()


def test_batch_size_above_1000_is_refused(moto_s3):
    with pytest.raises(ValueError, match="1000"):
        delete_objects_in_batches(moto_s3, "unit-bucket", ["a"], batch_size=1001)


def test_access_denied_key_is_reported_failed_and_kept(moto_s3):
    keys = put(moto_s3, 5)
    client = CountingClient(moto_s3, errors_by_call={0: {"k/00002": "AccessDenied"}})
    outcome = delete_objects_in_batches(client, "unit-bucket", keys, sleep=lambda _: None)
    assert outcome.failed == {"k/00002": "AccessDenied: injected"}
    assert "k/00002" not in outcome.deleted and len(outcome.deleted) == 4
    assert remaining(moto_s3) == {"k/00002"}
    assert client.calls == [5]  # AccessDenied is not retried


def test_slowdown_keys_are_retried_with_backoff(moto_s3):
    keys = put(moto_s3, 3)
    delays: list[float] = []
    client = CountingClient(moto_s3, errors_by_call={0: {"k/00001": "SlowDown"}, 1: {"k/00001": "InternalError"}})
    outcome = delete_objects_in_batches(client, "unit-bucket", keys, sleep=delays.append, base_delay=0.1)
    assert outcome.failed == {}
    assert sorted(outcome.deleted) == keys
    assert client.calls == [3, 1, 1]  # only the failing key is resent
    assert len(delays) == 2
    assert remaining(moto_s3) == set()


def test_slowdown_until_attempts_run_out_stays_failed(moto_s3):
    keys = put(moto_s3, 2)
    client = CountingClient(moto_s3, errors_by_call={i: {"k/00000": "SlowDown"} for i in range(10)})
    outcome = delete_objects_in_batches(client, "unit-bucket", keys, max_attempts=3, sleep=lambda _: None)
    assert list(outcome.failed) == ["k/00000"] and outcome.failed["k/00000"].startswith("SlowDown")
    assert outcome.deleted == ["k/00001"]
    assert remaining(moto_s3) == {"k/00000"}


def test_missing_keys_count_as_deleted(moto_s3):
    outcome = delete_objects_in_batches(moto_s3, "unit-bucket", ["never/was"])
    assert outcome.deleted == ["never/was"] and outcome.failed == {}


def test_a_failed_call_is_not_retried_on_top_of_botocore(moto_s3):
    """A whole call's failure was retried by botocore already (the client's policy): blobgc sends it once."""
    keys = put(moto_s3, 2)
    err = ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "busy"},
                       "ResponseMetadata": {"HTTPStatusCode": 503}}, "DeleteObjects")
    client = CountingClient(moto_s3, raise_on={0: err})
    with pytest.raises(ClientError):
        delete_objects_in_batches(client, "unit-bucket", keys, sleep=lambda _: None)
    assert client.calls == [2]
    assert remaining(moto_s3) == set(keys)


def test_an_s3_outage_costs_exactly_the_connections_retry_attempts(s3, bucket):
    """One retry policy, the connection's `config_kwargs`: 3 retries there (botocore's `max_attempts`) mean 4 HTTP
    requests in all, not 4 for each of blobgc's own 5 attempts (20, as before)."""
    import os

    from blobgc.dag_kit.connections import client_config
    from tests.helpers import s3_outage

    config = client_config({"config_kwargs": {"retries": {"max_attempts": 3, "mode": "standard"},
                                              "s3": {"addressing_style": "path"}}})
    client = boto3.client("s3", endpoint_url=os.environ["BLOBGC_S3_ENDPOINT"], config=config,
                          aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    sent: list[str] = []
    client.meta.events.register("before-send.s3.DeleteObjects", lambda request, **_: sent.append(request.url))
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    s3_outage(bucket, True)
    try:
        with pytest.raises(ClientError):
            delete_objects_in_batches(client, bucket, ["k"], sleep=lambda _: None)
    finally:
        s3_outage(bucket, False)
    assert len(sent) == 4
    assert f"/{bucket}?delete" in sent[0]  # the connection's path-style addressing is honoured too


def test_non_retryable_call_error_propagates(moto_s3):
    err = ClientError({"Error": {"Code": "NoSuchBucket", "Message": "gone"},
                       "ResponseMetadata": {"HTTPStatusCode": 404}}, "DeleteObjects")
    client = CountingClient(moto_s3, raise_on={0: err})
    with pytest.raises(ClientError):
        delete_objects_in_batches(client, "unit-bucket", ["a"], sleep=lambda _: None)


def test_duplicate_keys_are_sent_once(moto_s3):
    put(moto_s3, 1)
    client = CountingClient(moto_s3)
    outcome = delete_objects_in_batches(client, "unit-bucket", ["k/00000", "k/00000"])
    assert client.calls == [1] and outcome.deleted == ["k/00000"]


def test_versioned_bucket_deletes_report_each_delete_marker_version_id(moto_s3):
    from blobgc.core.objects import bucket_is_versioned

    assert not bucket_is_versioned(moto_s3, "unit-bucket")
    moto_s3.put_bucket_versioning(Bucket="unit-bucket", VersioningConfiguration={"Status": "Enabled"})
    assert bucket_is_versioned(moto_s3, "unit-bucket")
    keys = put(moto_s3, 1001)
    outcome = delete_objects_in_batches(moto_s3, "unit-bucket", keys, versioned=True)
    markers = {m["Key"]: m["VersionId"] for page in moto_s3.get_paginator("list_object_versions").paginate(
        Bucket="unit-bucket") for m in page.get("DeleteMarkers", [])}
    assert sorted(outcome.deleted) == sorted(keys) and outcome.markers == markers and len(markers) == 1001


def test_unversioned_deletes_stay_quiet_and_report_no_markers(moto_s3):
    keys = put(moto_s3, 3)
    client = CountingClient(moto_s3)
    outcome = delete_objects_in_batches(client, "unit-bucket", keys)
    assert outcome.markers == {} and sorted(outcome.deleted) == keys


def test_object_sizes_finds_dense_and_sparse_keys(s3, bucket):
    """The existence check lists dense runs of keys and HEADs sparse ones; both agree with the bucket."""
    from blobgc.core.objects import object_sizes

    keys = [f"k/{i:04d}" for i in range(1200)]
    with __import__("concurrent.futures").futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=b"z" * (len(k) % 5 + 1)), keys))
    wanted = keys[::3] + [f"k/{i:04d}x" for i in range(0, 1200, 100)]  # every third, plus missing neighbours
    found = object_sizes(s3, bucket, wanted, concurrency=2)
    assert found == {k: len(k) % 5 + 1 for k in keys[::3]}
    sparse = keys[::97]
    assert object_sizes(s3, bucket, sparse) == {k: len(k) % 5 + 1 for k in sparse}
