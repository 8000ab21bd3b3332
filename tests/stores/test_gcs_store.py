"""blobgc.core.stores.gcs.GcsStore against the stack's local GCS server (scripts/gcs_server.py, BLOBGC_GCS_ENDPOINT),
built from the stack's connection `blobgc_gcs` as the DAGs build it: listings, HEAD, batched deletes with per-key
errors, copies with their precondition, versioning in S3's terms, and the core's own functions on top."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from google.api_core.retry import Retry
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from blobgc.collectors.restore import markers_above_newest_version, undo_deletions
from blobgc.core.objects import (
    SourceChanged,
    copy_verified,
    delete_objects_in_batches,
    leading_shards,
    object_stats,
)
from blobgc.core.quarantine import delete_copies
from blobgc.core.stores.gcs import GcsStore, s3_rules
from blobgc.dag_kit.store_gcs import gcs_store
from tests.support.stores import server_endpoint, server_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def gcs_endpoint(stack):
    """The local GCS server's endpoint, from the stack's environment (`make up` starts it): a missing
    variable, or a server that does not answer, fails the tests; they never skip."""
    return server_endpoint("gcs")


@pytest.fixture(scope="session")
def gcs(gcs_endpoint) -> GcsStore:
    """The store of connection blobgc_gcs, built as the Airflow layer builds it."""
    return gcs_store("blobgc_gcs")


def new_bucket(endpoint: str, *, versioned: bool) -> str:
    name = f"gcs-test-{uuid.uuid4().hex[:16]}"
    server_script("gcs").ensure_buckets(endpoint, [name], versioned)
    return name


@pytest.fixture
def bucket(gcs_endpoint) -> str:
    return new_bucket(gcs_endpoint, versioned=False)


@pytest.fixture
def versioned_bucket(gcs_endpoint) -> str:
    return new_bucket(gcs_endpoint, versioned=True)


def backdate(endpoint: str, bucket: str, key: str, seconds: float) -> None:
    query = urllib.parse.urlencode({"bucket": bucket, "key": key, "seconds": seconds})
    request = urllib.request.Request(f"{endpoint}/_blobgc/backdate?{query}", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


def put_many(gcs: GcsStore, bucket: str, keys: list[str], body: bytes = b"x") -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: gcs.put_object(Bucket=bucket, Key=k, Body=body), keys))


def listed_keys(gcs: GcsStore, bucket: str, prefix: str = "") -> list[str]:
    return [c["Key"] for p in gcs.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for c in p.get("Contents", [])]


def count_requests(monkeypatch, gcs: GcsStore) -> list[tuple[str, str]]:
    """Record (method, url) of every HTTP request the store's client sends."""
    seen: list[tuple[str, str]] = []
    session = gcs.client._http
    original = session.request

    def request(method, url, *args, **kwargs):
        seen.append((method, url))
        return original(method, url, *args, **kwargs)

    monkeypatch.setattr(session, "request", request)
    return seen


def test_store_from_the_stack_connection_uses_its_endpoint_project_and_anonymous_credentials(gcs, gcs_endpoint):
    assert gcs.endpoint == gcs_endpoint
    assert gcs.client.project == "blobgc-local"
    assert isinstance(gcs.client._credentials, AnonymousCredentials)


def test_list_a_range_after_start_after_under_a_prefix_in_pages_of_max_keys(gcs, bucket):
    keys = [f"p/{i:03d}" for i in range(12)] + ["p/é", "p0", "o/1", "q/1"]
    put_many(gcs, bucket, keys)
    first = gcs.list_objects_v2(Bucket=bucket, Prefix="p/", StartAfter="p/004", MaxKeys=3)
    assert [c["Key"] for c in first["Contents"]] == ["p/005", "p/006", "p/007"]
    assert first["IsTruncated"] is True and first["KeyCount"] == 3
    pages = list(gcs.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="p/", StartAfter="p/004",
                                                                MaxKeys=3))
    assert [[c["Key"] for c in p.get("Contents", [])] for p in pages] == [
        ["p/005", "p/006", "p/007"], ["p/008", "p/009", "p/010"], ["p/011", "p/é"]
    ]
    assert [p["IsTruncated"] for p in pages] == [True, True, False]
    one = gcs.list_objects_v2(Bucket=bucket, Prefix="p/", StartAfter="p/011", MaxKeys=1)  # the core's first_key
    assert [c["Key"] for c in one["Contents"]] == ["p/é"]
    assert leading_shards(gcs, bucket, "p/") == ["p/0", "p/é"]  # StartAfter past each shard, as the core skips them
    top = gcs.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["o/", "p/", "q/"]
    assert [c["Key"] for c in top["Contents"]] == ["p0"]


def test_a_listing_of_a_missing_bucket_raises_no_such_bucket(gcs):
    with pytest.raises(ClientError) as raised:
        gcs.list_objects_v2(Bucket=f"gcs-missing-{uuid.uuid4().hex[:12]}", MaxKeys=1)
    assert raised.value.response["Error"]["Code"] == "NoSuchBucket"


def test_head_reports_size_and_backdated_time_and_404_for_a_missing_key(gcs, bucket, gcs_endpoint):
    gcs.put_object(Bucket=bucket, Key="h/1", Body=b"12345", ContentType="text/plain", Metadata={"a": "b"})
    backdate(gcs_endpoint, bucket, "h/1", 3 * 86400)
    head = gcs.head_object(Bucket=bucket, Key="h/1")
    assert head["ContentLength"] == 5 and head["ContentType"] == "text/plain" and head["Metadata"] == {"a": "b"}
    expected = datetime.now(UTC) - timedelta(days=3)
    assert abs(head["LastModified"] - expected) < timedelta(minutes=1)
    assert head["ETag"] == '"827ccb0eea8a706c4c34a16891f84e7b"'  # md5 of 12345, as S3 reports it
    assert head["ChecksumType"] == "FULL_OBJECT" and head["ChecksumCRC32C"]
    assert gcs.list_objects_v2(Bucket=bucket, Prefix="h/")["Contents"][0]["LastModified"] == head["LastModified"]
    assert object_stats(gcs, bucket, ["h/1", "h/2"])["h/1"].modified == head["LastModified"]
    with pytest.raises(ClientError) as raised:
        gcs.head_object(Bucket=bucket, Key="h/2")
    assert raised.value.response["Error"]["Code"] == "404"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_get_object_reads_in_chunks_of_the_generation_it_described_never_a_newer_one(gcs, bucket, monkeypatch):
    import blobgc.core.stores.gcs as gcs_module

    monkeypatch.setattr(gcs_module, "READ_CHUNK", 256 * 1024)
    body = os.urandom(700 * 1024)
    gcs.put_object(Bucket=bucket, Key="big/1", Body=body)
    answer = gcs.get_object(Bucket=bucket, Key="big/1")
    assert answer["ContentLength"] == len(body)
    assert answer["Body"].read(1000) == body[:1000]
    gcs.put_object(Bucket=bucket, Key="big/1", Body=b"written again")
    with pytest.raises(ClientError) as raised:
        answer["Body"].read()  # the next chunk would be another object's: the generation read is gone
    assert raised.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ClientError) as raised:
        gcs.get_object(Bucket=bucket, Key="big/none")
    assert raised.value.response["Error"]["Code"] == "NoSuchKey"


def test_backdate_answers_404_for_a_missing_object(gcs_endpoint, bucket):
    with pytest.raises(urllib.error.HTTPError) as raised:
        backdate(gcs_endpoint, bucket, "nothing/here", 60)
    assert raised.value.code == 404


def test_one_delete_objects_call_of_250_keys_goes_as_json_api_batches_with_a_held_key_in_errors(
    gcs, bucket, monkeypatch, gcs_endpoint
):
    keys = [f"d/{i:04d}" for i in range(250)]
    put_many(gcs, bucket, keys)
    held = gcs.client.bucket(bucket).blob("d/0100")
    held.temporary_hold = True
    held.patch()
    seen = count_requests(monkeypatch, gcs)
    answer = gcs.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in [*keys, "d/missing"]], "Quiet": False}
    )
    batches = [(m, u) for m, u in seen if "/batch/" in u]
    assert batches == [("POST", f"{gcs_endpoint}/batch/storage/v1")] * 3  # 251 calls: 100 + 100 + 51
    assert [u for _, u in seen if "/batch/" not in u] == [  # besides, only the bucket's versioning is read
        f"{gcs_endpoint}/storage/v1/b/{bucket}?projection=noAcl&prettyPrint=false"
    ]
    errors = {e["Key"]: e["Code"] for e in answer["Errors"]}
    assert errors == {"d/0100": "AccessDenied", "d/missing": "NoSuchKey"}
    assert sorted(d["Key"] for d in answer["Deleted"]) == sorted(k for k in keys if k != "d/0100")
    assert listed_keys(gcs, bucket, "d/") == ["d/0100"]


def test_delete_in_batches_counts_a_missing_key_deleted_and_keeps_a_held_one_owed(gcs, bucket):
    keys = [f"e/{i:04d}" for i in range(120)]
    put_many(gcs, bucket, keys)
    held = gcs.client.bucket(bucket).blob("e/0007")
    held.event_based_hold = True
    held.patch()
    outcome = delete_objects_in_batches(gcs, bucket, [*keys, "e/gone"], sleep=lambda _: None)
    assert set(outcome.deleted) == (set(keys) - {"e/0007"}) | {"e/gone"}
    assert set(outcome.failed) == {"e/0007"} and outcome.permanent == {"e/0007"}
    assert outcome.failed["e/0007"].startswith("AccessDenied")


def test_delete_in_batches_of_1001_keys_makes_two_delete_objects_calls_and_deletes_them_all(gcs, bucket):
    keys = [f"m/{i:05d}" for i in range(1001)]
    put_many(gcs, bucket, keys)
    outcome = delete_objects_in_batches(gcs, bucket, keys, concurrency=2)
    assert outcome.calls == 2 and sorted(outcome.deleted) == keys and outcome.failed == {}
    assert listed_keys(gcs, bucket, "m/") == []


def test_a_failed_batch_request_raises_endpoint_connection_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = storage.Client(project="p", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": f"http://127.0.0.1:{port}"})
    store = GcsStore(client, retry=Retry(timeout=1, initial=0.1, maximum=0.2))
    with pytest.raises(EndpointConnectionError):
        store.delete_objects(Bucket="b", Delete={"Objects": [{"Key": "k"}], "Quiet": True})


def test_copy_with_a_matching_copy_source_if_match_copies_and_a_stale_one_is_refused(gcs, bucket):
    gcs.put_object(Bucket=bucket, Key="c/src", Body=b"source bytes")
    etag = gcs.head_object(Bucket=bucket, Key="c/src")["ETag"]
    copied = gcs.copy_object(Bucket=bucket, Key="c/dst", CopySource={"Bucket": bucket, "Key": "c/src"},
                             CopySourceIfMatch=etag, MetadataDirective="COPY")
    assert copied["CopyObjectResult"]["ETag"] == etag
    assert gcs.get_object(Bucket=bucket, Key="c/dst")["Body"].read() == b"source bytes"
    gcs.put_object(Bucket=bucket, Key="c/src", Body=b"written again")
    with pytest.raises(ClientError) as raised:
        gcs.copy_object(Bucket=bucket, Key="c/dst2", CopySource={"Bucket": bucket, "Key": "c/src"},
                        CopySourceIfMatch=etag, MetadataDirective="COPY")
    assert raised.value.response["Error"]["Code"] == "PreconditionFailed"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert "c/dst2" not in listed_keys(gcs, bucket, "c/")


def test_a_source_written_again_between_the_etag_check_and_the_rewrite_is_refused(gcs, bucket, monkeypatch):
    gcs.put_object(Bucket=bucket, Key="r/src", Body=b"first")
    etag = gcs.head_object(Bucket=bucket, Key="r/src")["ETag"]
    original = storage.Blob.reload

    def read_then_overwrite(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.bucket.blob(self.name).upload_from_string(b"second")  # after the adapter read the generation it names

    monkeypatch.setattr(storage.Blob, "reload", read_then_overwrite)
    with pytest.raises(ClientError) as raised:
        gcs.copy_object(Bucket=bucket, Key="r/dst", CopySource={"Bucket": bucket, "Key": "r/src"},
                        CopySourceIfMatch=etag, MetadataDirective="COPY")
    assert raised.value.response["Error"]["Code"] == "PreconditionFailed"
    monkeypatch.undo()
    assert "r/dst" not in listed_keys(gcs, bucket, "r/")


def test_copy_verified_copies_and_verifies_on_gcs_and_refuses_a_changed_source(gcs, bucket):
    gcs.put_object(Bucket=bucket, Key="v/src", Body=b"v" * 1000, Metadata={"k": "v"})
    done = copy_verified(gcs, bucket, "v/src", "v/dst")
    source = gcs.head_object(Bucket=bucket, Key="v/src")
    assert (done.size, done.etag, done.source_etag, done.parts) == (1000, source["ETag"].strip('"'),
                                                                    source["ETag"].strip('"'), 0)
    assert gcs.head_object(Bucket=bucket, Key="v/dst")["Metadata"] == {"k": "v"}
    with pytest.raises(SourceChanged):
        copy_verified(gcs, bucket, "v/src", "v/dst3", size=1000, etag="0" * 32)


def test_versioned_delete_leaves_a_marker_that_undo_removes_bringing_the_object_back(gcs, versioned_bucket):
    bucket = versioned_bucket
    gcs.put_object(Bucket=bucket, Key="u/1", Body=b"old")
    gcs.put_object(Bucket=bucket, Key="u/1", Body=b"kept")  # the first generation is noncurrent now
    gcs.put_object(Bucket=bucket, Key="u/2", Body=b"other")
    outcome = delete_objects_in_batches(gcs, bucket, ["u/1"], versioned=True)
    assert outcome.deleted == ["u/1"] and outcome.markers["u/1"].startswith("deleted:")
    pages = list(gcs.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="u/1"))
    markers = [m for p in pages for m in p["DeleteMarkers"]]
    versions = [v for p in pages for v in p["Versions"]]
    assert [(m["Key"], m["VersionId"], m["IsLatest"]) for m in markers] == [("u/1", outcome.markers["u/1"], True)]
    assert [v["IsLatest"] for v in versions] == [False, False]
    assert markers_above_newest_version(gcs, bucket, "u/1") == ([outcome.markers["u/1"]], True)
    with pytest.raises(ClientError):
        gcs.head_object(Bucket=bucket, Key="u/1")
    [(key, recorded, result, detail)] = undo_deletions(gcs, bucket, ["u/1"], dict(outcome.markers))
    assert (key, recorded, result, detail) == ("u/1", outcome.markers["u/1"], "restored", None)
    assert gcs.get_object(Bucket=bucket, Key="u/1")["Body"].read() == b"kept"
    assert markers_above_newest_version(gcs, bucket, "u/1") == ([], True)


def test_the_quarantine_purge_deletes_every_generation_and_marker_bringing_nothing_back(gcs, versioned_bucket):
    bucket = versioned_bucket
    for body in (b"1", b"2"):
        gcs.put_object(Bucket=bucket, Key="q/copy", Body=body)
    gcs.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "q/copy"}], "Quiet": False})
    gcs.put_object(Bucket=bucket, Key="q/live", Body=b"3")
    assert delete_copies(gcs, bucket, ["q/copy", "q/live"], versioned=True) == {}
    pages = list(gcs.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="q/"))
    assert [(p["Versions"], p["DeleteMarkers"]) for p in pages] == [([], [])]


def test_deleting_a_generation_by_version_id_removes_it_for_good(gcs, versioned_bucket):
    bucket = versioned_bucket
    gcs.put_object(Bucket=bucket, Key="g/1", Body=b"one")
    answer = gcs.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "g/1"}], "Quiet": False})
    [version] = [v for p in gcs.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="g/")
                 for v in p["Versions"]]
    assert answer["Deleted"][0]["DeleteMarkerVersionId"] == f"deleted:{version['VersionId']}"
    gone = gcs.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "g/1", "VersionId": version["VersionId"]}],
                                                     "Quiet": False})
    assert gone["Deleted"] == [{"Key": "g/1", "VersionId": version["VersionId"]}]
    pages = list(gcs.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="g/"))
    assert [(p["Versions"], p["DeleteMarkers"]) for p in pages] == [([], [])]


def test_bucket_versioning_and_its_noncurrent_lifecycle_rule_in_s3_terms(gcs, versioned_bucket, bucket):
    assert gcs.get_bucket_versioning(Bucket=versioned_bucket) == {"Status": "Enabled"}
    assert gcs.get_bucket_versioning(Bucket=bucket) == {}
    rules = gcs.get_bucket_lifecycle_configuration(Bucket=versioned_bucket)["Rules"]
    assert [(r["Status"], r["Filter"], r["NoncurrentVersionExpiration"]) for r in rules] == [
        ("Enabled", {"Prefix": ""}, {"NoncurrentDays": 7})
    ]
    with pytest.raises(ClientError) as raised:
        gcs.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert raised.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"


def test_gcs_lifecycle_rules_that_delete_noncurrent_generations_read_as_noncurrent_version_expiration():
    rules = [
        {"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": 3, "matchesPrefix": ["a/", "b/"]}},
        {"action": {"type": "Delete"}, "condition": {"age": 10, "isLive": False}},
        {"action": {"type": "Delete"}, "condition": {"age": 30}},  # live objects: no noncurrent expiration
        {"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": 1, "matchesSuffix": [".tmp"]}},
        {"action": {"type": "SetStorageClass"}, "condition": {"daysSinceNoncurrentTime": 1}},
    ]
    assert [(r["Filter"], r["NoncurrentVersionExpiration"]["NoncurrentDays"]) for r in s3_rules(rules)] == [
        ({"Prefix": "a/"}, 3), ({"Prefix": "b/"}, 3), ({"Prefix": ""}, 10)
    ]


def test_ensure_buckets_is_idempotent_and_turns_versioning_on(gcs, gcs_endpoint, bucket):
    script = server_script("gcs")
    script.ensure_buckets(gcs_endpoint, [bucket], True)
    script.ensure_buckets(gcs_endpoint, [bucket], True)
    assert gcs.get_bucket_versioning(Bucket=bucket) == {"Status": "Enabled"}


def test_server_lists_with_start_and_end_offsets_and_page_tokens(gcs, bucket):
    put_many(gcs, bucket, [f"o/{i}" for i in range(6)])
    client = gcs.client
    assert [b.name for b in client.list_blobs(bucket, start_offset="o/2", end_offset="o/5")] == ["o/2", "o/3", "o/4"]
    iterator = client.list_blobs(bucket, page_size=4)
    assert [[b.name for b in page] for page in iterator.pages] == [["o/0", "o/1", "o/2", "o/3"], ["o/4", "o/5"]]


def test_server_refuses_a_delete_whose_generation_precondition_fails(gcs, bucket):
    gcs.put_object(Bucket=bucket, Key="pre/1", Body=b"1")
    blob = gcs.client.bucket(bucket).get_blob("pre/1")
    from google.api_core.exceptions import PreconditionFailed

    with pytest.raises(PreconditionFailed):
        blob.delete(if_generation_match=blob.generation + 1)
    blob.delete(if_generation_match=blob.generation)
    assert listed_keys(gcs, bucket, "pre/") == []


def missing_bucket_name() -> str:
    return f"gcs-missing-{uuid.uuid4().hex[:12]}"


def test_deletes_in_a_missing_bucket_fail_no_such_bucket_and_are_never_counted_deleted(gcs):
    missing = missing_bucket_name()
    answer = gcs.delete_objects(
        Bucket=missing, Delete={"Objects": [{"Key": "a"}, {"Key": "b", "VersionId": "1"}], "Quiet": True}
    )
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("a", "NoSuchBucket"), ("b", "NoSuchBucket")]
    outcome = delete_objects_in_batches(gcs, missing, ["a", "b", "c"], sleep=lambda _: None)
    assert outcome.deleted == [] and set(outcome.failed) == {"a", "b", "c"}
    assert all(why.startswith("NoSuchBucket") for why in outcome.failed.values())
    found, unread = gcs.live_generations(missing, ["a"])  # the generations a versioned delete reads first
    assert found == {} and [(e["Key"], e["Code"]) for e in unread] == [("a", "NoSuchBucket")]


def test_head_get_and_copy_in_a_missing_bucket_raise_no_such_bucket_not_a_missing_key(gcs, bucket):
    missing = missing_bucket_name()
    gcs.put_object(Bucket=bucket, Key="s/1", Body=b"1")
    calls = [
        lambda: gcs.head_object(Bucket=missing, Key="k"),
        lambda: gcs.get_object(Bucket=missing, Key="k"),
        lambda: gcs.copy_object(Bucket=bucket, Key="s/2", CopySource={"Bucket": missing, "Key": "k"},
                                CopySourceIfMatch='"00"', MetadataDirective="COPY"),
    ]
    for call in calls:
        with pytest.raises(ClientError) as raised:
            call()
        assert raised.value.response["Error"]["Code"] == "NoSuchBucket"


def short_pages(endpoint: str, bucket: str, limit: int, empty: bool) -> None:
    """The server's test hook: listings of `bucket` answer at most `limit` entries a page, and an empty page (with a
    nextPageToken) before each page that holds any when `empty`."""
    query = urllib.parse.urlencode({"bucket": bucket, "limit": limit, "empty": int(empty)})
    request = urllib.request.Request(f"{endpoint}/_blobgc/pages?{query}", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


def test_a_listing_pages_on_through_short_and_empty_pages_until_gcs_has_no_next_page(gcs, bucket, gcs_endpoint):
    keys = [f"s/{i}" for i in range(5)] + ["t/1", "t/2/x"]
    put_many(gcs, bucket, keys)
    short_pages(gcs_endpoint, bucket, 1, True)
    assert [b.name for b in gcs.client.list_blobs(bucket)] == keys  # the hook answers short and empty pages
    one = gcs.list_objects_v2(Bucket=bucket, Prefix="s/", StartAfter="s/1", MaxKeys=3)
    assert one["IsTruncated"] is True and [c["Key"] for c in one["Contents"]] == ["s/2"]
    pages = list(gcs.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="s/", StartAfter="s/1",
                                                                MaxKeys=3))
    assert [c["Key"] for p in pages for c in p.get("Contents", [])] == ["s/2", "s/3", "s/4"]
    assert listed_keys(gcs, bucket) == keys
    top = list(gcs.get_paginator("list_objects_v2").paginate(Bucket=bucket, Delimiter="/"))
    assert [c["Prefix"] for p in top for c in p.get("CommonPrefixes", [])] == ["s/", "t/"]
    assert set(object_stats(gcs, bucket, keys)) == set(keys)
    short_pages(gcs_endpoint, bucket, 0, False)
    assert gcs.list_objects_v2(Bucket=bucket)["KeyCount"] == len(keys)


def test_a_versioned_delete_is_held_to_the_generation_it_read_and_a_write_in_between_stays(
    gcs, versioned_bucket, monkeypatch
):
    bucket = versioned_bucket
    for key in ("w/old", "w/rewritten"):
        gcs.put_object(Bucket=bucket, Key=key, Body=b"first")
    original = GcsStore.live_generations

    def read_then_write(self, bucket_name, keys):
        read = original(self, bucket_name, keys)
        for key in ("w/rewritten", "w/new"):  # written after the adapter read the generations (w/new: none yet)
            self.client.bucket(bucket_name).blob(key).upload_from_string(b"in use")
        return read

    monkeypatch.setattr(GcsStore, "live_generations", read_then_write)
    outcome = delete_objects_in_batches(gcs, bucket, ["w/old", "w/rewritten", "w/new"], versioned=True,
                                        sleep=lambda _: None)
    monkeypatch.undo()
    assert set(outcome.deleted) == {"w/old", "w/new"}  # w/new had no live object when read: NoSuchKey, not deleted
    assert set(outcome.markers) == {"w/old"}
    assert outcome.failed["w/rewritten"].startswith("PreconditionFailed")
    for key in ("w/rewritten", "w/new"):
        assert gcs.get_object(Bucket=bucket, Key=key)["Body"].read() == b"in use"
    [marker] = [m for p in gcs.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="w/")
                for m in p["DeleteMarkers"]]
    assert (marker["Key"], marker["VersionId"]) == ("w/old", outcome.markers["w/old"])


class UnreachableTokenEndpoint(AnonymousCredentials):
    """Credentials whose token refresh cannot reach the token endpoint, as google.auth raises it."""

    @property
    def valid(self):
        return False

    def refresh(self, request):
        from google.auth.exceptions import TransportError

        raise TransportError("could not reach https://oauth2.googleapis.com/token")

    def before_request(self, request, method, url, headers):
        self.refresh(request)


def test_a_token_refresh_that_cannot_reach_its_endpoint_raises_endpoint_connection_error(gcs_endpoint, bucket):
    from blobgc.core.objects import is_transient

    client = storage.Client(project="blobgc-local", credentials=UnreachableTokenEndpoint(),
                            client_options={"api_endpoint": gcs_endpoint})
    store = GcsStore(client)
    with pytest.raises(EndpointConnectionError) as raised:
        store.put_object(Bucket=bucket, Key="t/1", Body=b"1")
    assert is_transient(raised.value)


def test_a_connection_broken_while_a_body_is_read_raises_endpoint_connection_error(gcs):
    import urllib3

    from blobgc.core.objects import is_transient
    from blobgc.core.stores.gcs import GcsBody

    class Broken:
        def read(self, size=-1):
            raise urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(0 bytes read)")

        def close(self):
            pass

    with pytest.raises(EndpointConnectionError) as raised:
        GcsBody(gcs, Broken()).read()
    assert is_transient(raised.value)


def test_a_failed_marker_restore_is_that_keys_internal_error_and_the_deletes_are_still_reported(
    gcs, versioned_bucket, monkeypatch
):
    import requests

    bucket = versioned_bucket
    for key in ("f/1", "f/2", "f/3"):
        gcs.put_object(Bucket=bucket, Key=key, Body=key.encode())
    gone = gcs.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "f/1"}, {"Key": "f/2"}], "Quiet": False})
    marker = {d["Key"]: d["DeleteMarkerVersionId"] for d in gone["Deleted"]}
    original = storage.Blob.rewrite

    def rewrite(self, source, *args, **kwargs):
        if self.name == "f/1":
            raise requests.exceptions.ConnectionError("connection reset by peer")
        return original(self, source, *args, **kwargs)

    monkeypatch.setattr(storage.Blob, "rewrite", rewrite)
    answer = gcs.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "f/3"}, {"Key": "f/1", "VersionId": marker["f/1"]}, {"Key": "f/2", "VersionId": marker["f/2"]}
    ], "Quiet": False})
    monkeypatch.undo()
    assert sorted(d["Key"] for d in answer["Deleted"]) == ["f/2", "f/3"]
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("f/1", "InternalError")]
    assert gcs.get_object(Bucket=bucket, Key="f/2")["Body"].read() == b"f/2"


def test_keys_where_one_is_a_folder_of_the_other_coexist_on_the_server(gcs, bucket):
    keys = ["k/a", "k/a/b", "k/a/b/c", "j/a/b", "j/a", "d//x", "d/x"]
    for key in keys:
        gcs.put_object(Bucket=bucket, Key=key, Body=key.encode())
    assert listed_keys(gcs, bucket) == sorted(keys)
    for key in keys:
        assert gcs.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode()
    gone = gcs.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k/a"}], "Quiet": True})
    assert "Errors" not in gone
    assert gcs.get_object(Bucket=bucket, Key="k/a/b")["Body"].read() == b"k/a/b"
