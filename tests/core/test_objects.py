"""blobgc.core.objects: DeleteObjects in calls of at most 1000 keys, per-key errors, retries; sizes asked of the
store."""
from __future__ import annotations

from datetime import timedelta

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from blobgc.core.objects import delete_objects_in_batches
from tests.helpers import bulk_put
from tests.support.stores import StoreCalls


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


# ------------------------------------------------------------------ sizes and existence in bulk (issue 34)
def sized(i: int) -> int:
    return 1 + (i * 37) % 500


def test_dense_keys_across_a_1000_key_boundary_are_listed_with_exact_sizes_and_absent_keys_not_found(s3, bucket):
    """2,500 keys wanted, 2,400 stored among 3,000 objects: every size exact, the 100 never written not found, and
    not one HEAD: the ranges are listed, 1000 objects a page at most."""
    from blobgc.core.objects import object_stats

    bulk_put(bucket, [(f"d/{i:05d}", sized(i)) for i in range(3000) if i % 25])
    wanted = [f"d/{i:05d}" for i in range(0, 2500)]
    calls = StoreCalls(s3)
    found = object_stats(calls, bucket, wanted)
    assert {k: s.size for k, s in found.items()} == {f"d/{i:05d}": sized(i) for i in range(2500) if i % 25}
    assert calls.heads == 0 and calls.listed < 2 * 2500, (calls.pages, calls.listed)


def test_sparse_keys_are_headed_and_gaps_between_dense_clusters_are_never_listed(s3, bucket):
    """Two dense clusters with 5,000 objects between them are listed without listing the gap; keys scattered one in
    300 are asked with HEAD (a listing page would settle too few of them)."""
    from blobgc.core.objects import object_stats

    bulk_put(bucket, [(f"g/{i:05d}", sized(i)) for i in range(6000)])
    clusters = [f"g/{i:05d}" for i in list(range(0, 400)) + list(range(5600, 6000))]
    calls = StoreCalls(s3)
    assert {k: s.size for k, s in object_stats(calls, bucket, clusters).items()} == {
        k: sized(int(k[2:])) for k in clusters}
    assert calls.heads == 0 and calls.listed < 1200, (calls.pages, calls.listed)
    scattered = [f"g/{i:05d}" for i in range(0, 6000, 300)] + [f"g/{i:05d}x" for i in range(0, 6000, 300)]
    calls = StoreCalls(s3)
    assert {k: s.size for k, s in object_stats(calls, bucket, scattered).items()} == {
        f"g/{i:05d}": sized(i) for i in range(0, 6000, 300)}
    assert calls.heads >= len(scattered) - 16 and calls.pages <= 2, (calls.pages, calls.heads)


def test_listed_sizes_and_times_are_the_current_versions_of_a_versioned_bucket(s3, versioned_bucket):
    """Delete markers hide their keys; a key written twice is its current version; a backdated LastModified is the
    one listed; listing and HEAD agree on every key."""
    from blobgc.core.objects import head_stats, object_stats
    from tests.helpers import backdate_object

    keys = [f"v/{i:03d}" for i in range(40)]
    for key in keys:
        s3.put_object(Bucket=versioned_bucket, Key=key, Body=b"x" * 3)
    s3.put_object(Bucket=versioned_bucket, Key="v/001", Body=b"y" * 9)
    s3.delete_object(Bucket=versioned_bucket, Key="v/002")
    backdate_object(versioned_bucket, "v/003", 86_400)
    calls = StoreCalls(s3)
    listed = object_stats(calls, versioned_bucket, keys)
    assert calls.pages >= 1 and calls.heads == 0
    assert listed == head_stats(s3, versioned_bucket, keys)
    assert "v/002" not in listed and listed["v/001"].size == 9
    assert listed["v/003"].modified < listed["v/004"].modified - timedelta(hours=23)


def test_a_listing_the_credentials_may_not_make_falls_back_to_head(s3, bucket):
    """AccessDenied on ListObjectsV2 (no s3:ListBucket): the keys are HEADed instead; AccessDenied on HEAD too is
    raised, for the drain's own handling (delete without counting, keys judged by age stay owed)."""
    from blobgc.core.objects import object_stats

    bulk_put(bucket, [(f"n/{i:03d}", sized(i)) for i in range(50)])
    wanted = [f"n/{i:03d}" for i in range(60)]
    calls = StoreCalls(s3, deny_listing=True)
    assert {k: s.size for k, s in object_stats(calls, bucket, wanted).items()} == {
        f"n/{i:03d}": sized(i) for i in range(50)}
    assert calls.heads == 60
    with pytest.raises(ClientError):
        object_stats(StoreCalls(s3, deny_listing=True, deny_head=True), bucket, wanted)


def test_fast_listing_parses_pages_as_botocore_does(s3, bucket):
    """A client with `fast_listing` answers every ListObjectsV2 exactly as botocore's own parser: awkward keys,
    encoded or not, pages cut by MaxKeys, StartAfter and continuation tokens, backdated times, objects with checksums
    (left to botocore)."""
    from blobgc.core.clients import s3_client_from_env
    from blobgc.core.objects import fast_listing
    from tests.helpers import backdate_object

    awkward = ["a&b", "a<b>c", "sp ace", "plus+sign", "ünï/ключ", "q'uo\"te", "pct%41", "x]]>y", "z/" + "y" * 300]
    bulk_put(bucket, [(k, len(k)) for k in awkward])
    s3.put_object(Bucket=bucket, Key="with-checksum", Body=b"c" * 5, ChecksumAlgorithm="SHA256")
    backdate_object(bucket, "a&b", 86_400)
    fast = s3_client_from_env()
    fast_listing(fast)
    fast_listing(fast)  # idempotent
    token = s3.list_objects_v2(Bucket=bucket, MaxKeys=4)["NextContinuationToken"]
    for kwargs in ({}, {"MaxKeys": 4}, {"Prefix": "a"}, {"StartAfter": "b"}, {"EncodingType": "url"},
                   {"ContinuationToken": token}, {"Prefix": "with-"}, {"Delimiter": "/"}):
        mine, theirs = fast.list_objects_v2(Bucket=bucket, **kwargs), s3.list_objects_v2(Bucket=bucket, **kwargs)
        mine.pop("ResponseMetadata")
        theirs.pop("ResponseMetadata")
        assert mine == theirs, kwargs


def test_fast_deletes_send_the_body_botocore_would(s3, bucket, versioned_bucket):
    """A client with `fast_deletes` sends DeleteObjects requests byte for byte as botocore's own serializer does
    (body and headers, its checksum included), for awkward keys (escaped text, \\r and \\n, unicode, a lone
    surrogate), quiet or not; a request with a VersionId is left to botocore; and the local server deletes what it
    sends, versioned or not."""
    from botocore.awsrequest import AWSResponse

    from blobgc.core.clients import s3_client_from_env
    from blobgc.core.objects import DELETE_PLACEHOLDER, fast_deletes

    awkward = ["a&b", "a<b>c", "x]]>y", "sp ace", "q'uo\"te", "cr\rlf\n", "tab\t", "ünï/ключ", "lone\ud800", "😀",
               DELETE_PLACEHOLDER + "x", "z/" + "y" * 300]
    sent: dict[str, list] = {"fast": [], "botocore": []}

    class Answer:  # what the handler answers in place of a server: an empty DeleteObjects result
        def stream(self, **_):
            yield b"<DeleteResult></DeleteResult>"

    def catch(name):
        def handler(request, **_):
            sent[name].append((request.body, {k: v for k, v in request.headers.items()
                                              if k not in ("User-Agent", "X-Amz-Date", "Authorization",
                                                           "amz-sdk-invocation-id", "amz-sdk-request")}))
            return AWSResponse(request.url, 200, {}, Answer())
        return handler

    fast, botocore_own = s3_client_from_env(), s3_client_from_env()
    fast_deletes(fast)
    fast_deletes(fast)  # idempotent
    fast.meta.events.register("before-send.s3.DeleteObjects", catch("fast"))
    botocore_own.meta.events.register("before-send.s3.DeleteObjects", catch("botocore"))
    requests = [{"Objects": [{"Key": k} for k in awkward], "Quiet": True},
                {"Objects": [{"Key": k} for k in awkward], "Quiet": False},
                {"Objects": [{"Key": "a&b", "VersionId": "null"}, {"Key": "b"}], "Quiet": True}]
    for delete in requests:
        for client in (fast, botocore_own):
            client.delete_objects(Bucket=bucket, Delete=delete)
    assert requests[0]["Objects"][0] == {"Key": awkward[0]}  # the caller's request is left as it was
    assert len(sent["fast"]) == len(sent["botocore"]) == 3
    assert sent["fast"] == sent["botocore"]
    assert b"&#xD;" in sent["fast"][0][0] and DELETE_PLACEHOLDER.encode() + b"x<" in sent["fast"][0][0]
    really = s3_client_from_env()
    fast_deletes(really)
    storable = [k for k in awkward if not {"\ud800", "\r"} & set(k)]  # the local server stores neither
    for name in (bucket, versioned_bucket):
        for key in storable:
            s3.put_object(Bucket=name, Key=key, Body=b"abc")
        answer = really.delete_objects(Bucket=name, Delete={"Objects": [{"Key": k} for k in storable], "Quiet": True})
        assert not answer.get("Errors") and not s3.list_objects_v2(Bucket=name).get("Contents"), name


def test_the_local_servers_listing_is_motos_own_byte_for_byte(s3, bucket, versioned_bucket):
    """scripts/s3_server.py renders ListObjectsV2 pages itself (moto's serializer is slow): the same bytes as moto's
    own rendering (the header x-blobgc-moto-listing asks for it), whatever the parameters, on a versioned bucket with
    delete markers and noncurrent versions too."""
    import os
    import urllib.parse
    import urllib.request

    from tests.helpers import backdate_object

    for name in (bucket, versioned_bucket):
        keys = ["a&b", "a<b>c", "sp ace", "plus+sign", "ünï/ключ", "d/1", "d/2", "d/3", "e"]
        for key in keys:
            s3.put_object(Bucket=name, Key=key, Body=key.encode())
        s3.put_object(Bucket=name, Key="d/2", Body=b"again")
        s3.delete_object(Bucket=name, Key="d/3")
        backdate_object(name, "d/1", 3600)
        token = s3.list_objects_v2(Bucket=name, MaxKeys=2)["NextContinuationToken"]
        queries = [{}, {"max-keys": "2"}, {"prefix": "d/"}, {"start-after": "a<b>c"}, {"encoding-type": "url"},
                   {"continuation-token": token}, {"delimiter": "/"}, {"prefix": "nothing"}, {"max-keys": "0"},
                   {"fetch-owner": "true"}]
        for query in queries:
            url = f"{os.environ['BLOBGC_S3_ENDPOINT']}/{name}?" + urllib.parse.urlencode({"list-type": "2", **query})
            answers = []
            for headers in ({}, {"x-blobgc-moto-listing": "1"}):
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as answer:
                    answers.append((answer.status, answer.headers.get("Content-Type"), answer.read()))
            assert answers[0] == answers[1], (name, query)
