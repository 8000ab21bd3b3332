"""blobgc.core.stores.azure.AzureStore against the stack's local Azure server (scripts/azure_server.py: Azurite and
its front, BLOBGC_AZURE_ENDPOINT), built from the stack's connection `blobgc_azure` as the DAGs build it: listings,
HEAD, Blob Batch deletes with per-key errors (a leased blob), copies with their precondition, versioning in S3's
terms, and the core's own functions on top."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.core.exceptions import IncompleteReadError, ServiceResponseError
from azure.storage.blob import BlobServiceClient, ContainerClient, StorageStreamDownloader
from botocore.exceptions import ClientError, EndpointConnectionError

from blobgc.collectors.restore import markers_above_newest_version, undo_deletions
from blobgc.core.lifecycle import bucket_state
from blobgc.core.objects import (
    SourceChanged,
    copy_verified,
    delete_objects_in_batches,
    first_key,
    leading_shards,
    object_stats,
)
from blobgc.core.quarantine import delete_copies
from blobgc.core.stores.azure import AzureStore, s3_code
from blobgc.dag_kit.store_azure import azure_store
from tests.support.stores import remove_bucket, server_endpoint, server_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def azure_endpoint(stack):
    """The local Azure server's endpoint, from the stack's environment (`make up` starts it): a missing
    variable, or a server that does not answer, fails the tests; they never skip."""
    return server_endpoint("azure")


@pytest.fixture(scope="session")
def azure(azure_endpoint) -> AzureStore:
    """The store of connection blobgc_azure, built as the Airflow layer builds it (WasbHook)."""
    return azure_store("blobgc_azure")


def new_container(endpoint: str, *, versioned: bool) -> str:
    name = f"az-test-{uuid.uuid4().hex[:16]}"
    server_script("azure").ensure_buckets(endpoint, [name], versioned)
    return name


@pytest.fixture
def container(azure_endpoint) -> Iterator[str]:
    name = new_container(azure_endpoint, versioned=False)
    yield name
    remove_bucket("azure", name)  # Azurite keeps every blob in memory and lists more slowly as it holds more


@pytest.fixture
def versioned_container(azure_endpoint) -> Iterator[str]:
    name = new_container(azure_endpoint, versioned=True)
    yield name
    remove_bucket("azure", name)


def backdate(endpoint: str, bucket: str, key: str, seconds: float) -> None:
    """The server's aging call, at its root (the endpoint without the account)."""
    parts = urllib.parse.urlsplit(endpoint)
    query = urllib.parse.urlencode({"bucket": bucket, "key": key, "seconds": seconds})
    request = urllib.request.Request(f"{parts.scheme}://{parts.netloc}/_blobgc/backdate?{query}", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


def put_many(azure: AzureStore, bucket: str, keys: list[str], body: bytes = b"x") -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: azure.put_object(Bucket=bucket, Key=k, Body=body), keys))


def listed_keys(azure: AzureStore, bucket: str, prefix: str = "", **kwargs) -> list[str]:
    pages = azure.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, **kwargs)
    return [c["Key"] for p in pages for c in p.get("Contents", [])]


def counting_list_calls(monkeypatch) -> list[int]:
    """Count the List Blobs requests the adapter sends (one per `list_page`)."""
    calls: list[int] = []
    original = AzureStore.list_page

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AzureStore, "list_page", counted)
    return calls


def lease(azure: AzureStore, bucket: str, key: str):
    """An infinite lease on the blob: Azure then refuses to delete it without the lease id."""
    return azure.client.get_blob_client(bucket, key).acquire_lease(-1)


# ---------------------------------------------------------------- the connection


def test_azure_store_is_built_from_the_stacks_wasb_connection(azure, container):
    assert isinstance(azure, AzureStore)
    assert azure.client.account_name == "devstoreaccount1"
    assert azure.client.url.startswith(os.environ["BLOBGC_AZURE_ENDPOINT"])
    azure.put_object(Bucket=container, Key="a", Body=b"hello")
    assert listed_keys(azure, container) == ["a"]


def test_the_connections_extra_gives_the_accounts_versioning_and_noncurrent_rule(
    azure_endpoint, container, monkeypatch
):
    conn = json.loads(os.environ["AIRFLOW_CONN_BLOBGC_AZURE"])
    conn["extra"].update(versioning=True, noncurrent_version_days=7)
    monkeypatch.setenv("AIRFLOW_CONN_BLOBGC_AZURE_ACCOUNT", json.dumps(conn))
    store = azure_store("blobgc_azure_account")
    assert store.get_bucket_versioning(Bucket=container) == {"Status": "Enabled"}  # said, not observed: it is empty
    state = bucket_state(store, container)
    assert state.keeps_versions and state.noncurrent_days("any/key") == 7
    store.put_object(Bucket=container, Key="k", Body=b"x")  # the extra's keys reach no Azure call
    assert listed_keys(store, container) == ["k"]


def test_without_the_extra_an_unversioned_container_has_no_lifecycle_rule(azure, container):
    with pytest.raises(ClientError) as error:
        azure.get_bucket_lifecycle_configuration(Bucket=container)
    assert error.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"
    assert bucket_state(azure, container).versioning == ""


# ---------------------------------------------------------------- listing


def test_list_objects_v2_lists_a_prefix_after_start_after_in_key_order(azure, container):
    keys = [f"p/{i:03d}" for i in range(30)] + ["q/000", "o/999"]
    put_many(azure, container, keys)
    page = azure.list_objects_v2(Bucket=container, Prefix="p/", StartAfter="p/009", MaxKeys=1000)
    assert [c["Key"] for c in page["Contents"]] == [f"p/{i:03d}" for i in range(10, 30)]
    assert page["KeyCount"] == 20 and page["IsTruncated"] is False


def test_list_objects_v2_pages_of_max_keys_follow_start_after_and_continuation(azure, container):
    keys = [f"k/{i:03d}" for i in range(25)]
    put_many(azure, container, keys)
    first = azure.list_objects_v2(Bucket=container, Prefix="k/", MaxKeys=10)
    assert [c["Key"] for c in first["Contents"]] == keys[:10] and first["IsTruncated"]
    # paging on by StartAfter = the last key listed (as reconcile's listing does), then by the continuation token
    second = azure.list_objects_v2(Bucket=container, Prefix="k/", MaxKeys=10, StartAfter=keys[9])
    assert [c["Key"] for c in second["Contents"]] == keys[10:20]
    third = azure.list_objects_v2(
        Bucket=container, Prefix="k/", MaxKeys=10, ContinuationToken=second["NextContinuationToken"]
    )
    assert [c["Key"] for c in third["Contents"]] == keys[20:] and third["IsTruncated"] is False
    assert listed_keys(azure, container, "k/", MaxKeys=7) == keys


def test_list_objects_v2_with_a_delimiter_answers_common_prefixes(azure, container):
    put_many(azure, container, ["a/1", "a/2", "b/1", "loose"])
    page = azure.list_objects_v2(Bucket=container, Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["a/", "b/"]
    assert [c["Key"] for c in page["Contents"]] == ["loose"]


def test_leading_shards_finds_each_first_character(azure, container):
    put_many(azure, container, ["s/a1", "s/a2", "s/c1", "s/f9"])
    assert leading_shards(azure, container, "s/") == ["s/a", "s/c", "s/f"]


def test_listing_a_missing_container_raises_no_such_bucket(azure):
    with pytest.raises(ClientError) as error:
        azure.list_objects_v2(Bucket=f"az-missing-{uuid.uuid4().hex[:12]}")
    assert error.value.response["Error"]["Code"] == "NoSuchBucket"


# ---------------------------------------------------------------- HEAD, GET, aging


def test_head_object_reports_size_time_and_the_md5_etag(azure, container):
    before = datetime.now(UTC) - timedelta(seconds=2)
    azure.put_object(Bucket=container, Key="h", Body=b"12345", ContentType="text/plain", Metadata={"m": "v"})
    head = azure.head_object(Bucket=container, Key="h")
    assert head["ContentLength"] == 5
    assert head["ETag"] == '"827ccb0eea8a706c4c34a16891f84e7b"'  # md5 of b"12345"
    assert head["LastModified"].tzinfo is not None and head["LastModified"] >= before.replace(microsecond=0)
    assert head["Metadata"] == {"m": "v"} and head["ContentType"] == "text/plain"
    assert "ETagIsMD5" not in head
    assert azure.get_object(Bucket=container, Key="h")["Body"].read() == b"12345"


def test_head_object_of_a_missing_key_raises_404_as_boto3(azure, container):
    with pytest.raises(ClientError) as error:
        azure.head_object(Bucket=container, Key="nothing")
    assert error.value.response["Error"]["Code"] == "404"
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_backdate_ages_listing_and_head_until_the_blob_is_written_again(azure, azure_endpoint, container):
    azure.put_object(Bucket=container, Key="old", Body=b"x")
    written = azure.head_object(Bucket=container, Key="old")["LastModified"]
    backdate(azure_endpoint, container, "old", 3 * 86400)
    assert azure.head_object(Bucket=container, Key="old")["LastModified"] == written - timedelta(days=3)
    listed = azure.list_objects_v2(Bucket=container)["Contents"][0]
    assert listed["LastModified"] == written - timedelta(days=3)
    assert object_stats(azure, container, ["old"])["old"].modified == written - timedelta(days=3)
    azure.put_object(Bucket=container, Key="old", Body=b"new")
    assert azure.head_object(Bucket=container, Key="old")["LastModified"] >= written


def test_backdate_of_a_missing_blob_answers_404(azure_endpoint, container):
    with pytest.raises(urllib.error.HTTPError) as error:
        backdate(azure_endpoint, container, "nothing", 60)
    assert error.value.code == 404


# ---------------------------------------------------------------- batch deletes


def test_delete_objects_of_600_keys_sends_blob_batches_of_256_and_reports_the_leased_key(azure, container, monkeypatch):
    keys = [f"d/{i:04d}" for i in range(600)]
    put_many(azure, container, keys)
    lease(azure, container, "d/0300")
    sizes: list[int] = []
    original = ContainerClient.delete_blobs

    def counted(self, *blobs, **kwargs):
        sizes.append(len(blobs))
        return original(self, *blobs, **kwargs)

    monkeypatch.setattr(ContainerClient, "delete_blobs", counted)
    answer = azure.delete_objects(Bucket=container, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    assert sorted(sizes) == [88, 256, 256]
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("d/0300", "AccessDenied")]
    assert "Deleted" not in answer
    assert listed_keys(azure, container) == ["d/0300"]


def test_delete_objects_reports_a_missing_key_as_no_such_key_and_lists_the_deleted(azure, container):
    azure.put_object(Bucket=container, Key="here", Body=b"x")
    answer = azure.delete_objects(
        Bucket=container, Delete={"Objects": [{"Key": "here"}, {"Key": "gone"}], "Quiet": False}
    )
    assert answer["Deleted"] == [{"Key": "here"}]
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("gone", "NoSuchKey")]


def test_delete_objects_in_batches_counts_a_missing_key_deleted_and_keeps_the_leased_one_owed(azure, container):
    keys = [f"o/{i:04d}" for i in range(301)]
    put_many(azure, container, keys[:-1])  # the last one never existed
    lease(azure, container, "o/0007")
    # two calls of up to 300 keys (each cut into Blob Batches of 256 by the store)
    outcome = delete_objects_in_batches(azure, container, keys, batch_size=300, sleep=lambda _: None)
    assert set(outcome.failed) == {"o/0007"} and outcome.permanent == {"o/0007"}
    assert "AccessDenied" in outcome.failed["o/0007"]
    assert set(outcome.deleted) == set(keys) - {"o/0007"}
    assert outcome.calls == 2
    assert listed_keys(azure, container) == ["o/0007"]


@pytest.mark.parametrize(
    ("status", "azure_code", "s3"),
    [
        (404, "BlobNotFound", "NoSuchKey"),
        (412, "LeaseIdMissing", "AccessDenied"),
        (409, "LeaseIdMismatchWithBlobOperation", "AccessDenied"),
        (409, "BlobImmutableDueToLegalHold", "AccessDenied"),
        (403, "AuthorizationFailure", "AccessDenied"),
        (503, "ServerBusy", "SlowDown"),
        (429, "", "SlowDown"),
        (500, "InternalError", "InternalError"),
        (412, "ConditionNotMet", "PreconditionFailed"),
        (404, "ContainerNotFound", "NoSuchBucket"),
    ],
)
def test_per_key_azure_errors_get_s3s_codes(status, azure_code, s3):
    assert s3_code(status, azure_code) == s3


def test_a_batch_request_to_an_unreachable_server_raises_endpoint_connection_error():
    key = server_script("azure").ACCOUNT_KEY  # Azurite's well-known development key
    closed = "http://127.0.0.1:9/devstoreaccount1"  # the discard port: nothing listens
    client = BlobServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={key};BlobEndpoint={closed};",
        retry_total=0,
    )
    with pytest.raises(EndpointConnectionError):
        AzureStore(client).delete_objects(Bucket="c", Delete={"Objects": [{"Key": "k"}], "Quiet": True})


# ---------------------------------------------------------------- copies


def test_copy_object_with_the_sources_etag_copies_it(azure, container):
    put = azure.put_object(Bucket=container, Key="src", Body=b"payload", Metadata={"a": "1"})
    azure.copy_object(
        Bucket=container,
        Key="dst",
        CopySource={"Bucket": container, "Key": "src"},
        CopySourceIfMatch=put["ETag"],
        MetadataDirective="COPY",
    )
    copied = azure.head_object(Bucket=container, Key="dst")
    assert copied["ETag"] == put["ETag"] and copied["Metadata"] == {"a": "1"}
    assert azure.get_object(Bucket=container, Key="dst")["Body"].read() == b"payload"


def test_copy_object_with_a_stale_etag_is_refused_with_412(azure, container):
    stale = azure.put_object(Bucket=container, Key="src", Body=b"first")["ETag"]
    azure.put_object(Bucket=container, Key="src", Body=b"second")
    with pytest.raises(ClientError) as error:
        azure.copy_object(
            Bucket=container, Key="dst", CopySource={"Bucket": container, "Key": "src"}, CopySourceIfMatch=stale
        )
    assert error.value.response["Error"]["Code"] == "PreconditionFailed"
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert "dst" not in listed_keys(azure, container)


def test_copy_verified_copies_and_verifies_end_to_end(azure, container):
    body = os.urandom(300_000)
    azure.put_object(Bucket=container, Key="orig", Body=body)
    copied = copy_verified(azure, container, "orig", "quarantine/orig")
    assert copied.size == len(body) and copied.parts == 0 and copied.etag == copied.source_etag
    assert azure.get_object(Bucket=container, Key="quarantine/orig")["Body"].read() == body


def test_copy_verified_refuses_a_source_written_since_its_etag_was_read(azure, container):
    stale = azure.put_object(Bucket=container, Key="orig", Body=b"one")["ETag"]
    azure.put_object(Bucket=container, Key="orig", Body=b"two")
    with pytest.raises(SourceChanged):
        copy_verified(azure, container, "orig", "quarantine/orig", size=3, etag=stale)


# ---------------------------------------------------------------- versioning


def test_get_bucket_versioning_observes_versions_and_their_absence(azure, container, versioned_container):
    azure.put_object(Bucket=container, Key="k", Body=b"x")
    azure.put_object(Bucket=versioned_container, Key="k", Body=b"x")
    assert azure.get_bucket_versioning(Bucket=container) == {}
    assert azure.get_bucket_versioning(Bucket=versioned_container) == {"Status": "Enabled"}


def test_versioned_delete_answers_a_marker_lists_it_and_removing_it_brings_the_object_back(azure, versioned_container):
    bucket = versioned_container
    azure.put_object(Bucket=bucket, Key="v/a", Body=b"first")
    azure.put_object(Bucket=bucket, Key="v/a", Body=b"second")
    outcome = delete_objects_in_batches(azure, bucket, ["v/a"], versioned=True)
    assert outcome.deleted == ["v/a"] and outcome.markers["v/a"].startswith("deleted:")
    with pytest.raises(ClientError):
        azure.head_object(Bucket=bucket, Key="v/a")
    pages = list(azure.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="v/"))
    versions = [v for p in pages for v in p["Versions"]]
    markers = [m for p in pages for m in p["DeleteMarkers"]]
    assert len(versions) == 2 and not any(v["IsLatest"] for v in versions)
    assert [m["VersionId"] for m in markers] == [outcome.markers["v/a"]]
    assert markers_above_newest_version(azure, bucket, "v/a") == ([outcome.markers["v/a"]], True)
    results = undo_deletions(azure, bucket, ["v/a"], {"v/a": outcome.markers["v/a"]})
    assert [(key, status) for key, _, status, _ in results] == [("v/a", "restored")]
    assert azure.get_object(Bucket=bucket, Key="v/a")["Body"].read() == b"second"
    assert markers_above_newest_version(azure, bucket, "v/a") == ([], True)


def test_deleting_a_version_id_deletes_that_version_for_good(azure, versioned_container):
    bucket = versioned_container
    first = azure.put_object(Bucket=bucket, Key="x", Body=b"first")["VersionId"]
    second = azure.put_object(Bucket=bucket, Key="x", Body=b"second")["VersionId"]
    answer = azure.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "x", "VersionId": first}], "Quiet": False})
    assert answer["Deleted"] == [{"Key": "x", "VersionId": first}] and answer["Errors"] == []
    pages = list(azure.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="x"))
    assert [(v["VersionId"], v["IsLatest"]) for p in pages for v in p["Versions"]] == [(second, True)]
    assert azure.head_object(Bucket=bucket, Key="x", VersionId=second)["ContentLength"] == 6


def test_delete_copies_purges_every_version_of_a_quarantine_copy(azure, versioned_container):
    bucket = versioned_container
    azure.put_object(Bucket=bucket, Key="quarantine/q", Body=b"one")
    azure.put_object(Bucket=bucket, Key="quarantine/q", Body=b"two")
    assert delete_copies(azure, bucket, ["quarantine/q"], versioned=True) == {}
    pages = list(azure.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="quarantine/"))
    assert [e for p in pages for e in p["Versions"] + p["DeleteMarkers"]] == []


# ---------------------------------------------------------------- listing: StartAfter without a cached marker


def test_first_key_after_an_uncached_start_after_costs_one_list_request_per_5000_keys(azure, container, monkeypatch):
    keys = [f"k/{i:04d}" for i in range(300)]
    put_many(azure, container, keys)
    fresh = AzureStore(azure.client)  # no marker cached: as a task that did not list the page before
    calls = counting_list_calls(monkeypatch)
    assert first_key(fresh, container, "k/", "k/0250") == "k/0251"
    assert len(calls) == 1  # not one per key (or per small page) before it
    calls.clear()
    assert leading_shards(fresh, container, "k/", chars=2) == ["k/00", "k/01", "k/02"]
    assert len(calls) == 4  # one per shard found, and the one that finds none


def test_pages_after_an_uncached_start_after_resume_by_token_without_rescanning(azure, container, monkeypatch):
    keys = [f"r/{i:04d}" for i in range(300)]
    put_many(azure, container, keys)
    fresh = AzureStore(azure.client)
    calls = counting_list_calls(monkeypatch)
    pages = fresh.get_paginator("list_objects_v2").paginate(
        Bucket=container, Prefix="r/", StartAfter="r/0099", MaxKeys=1
    )
    got = [c["Key"] for _, p in zip(range(5), pages, strict=False) for c in p["Contents"]]
    assert got == keys[100:105]
    assert len(calls) == 5  # one request a page, never a rescan from the prefix's start
    calls.clear()
    assert listed_keys(fresh, container, "r/", StartAfter="r/0099", MaxKeys=60) == keys[100:]
    assert len(calls) == 4  # 200 keys in pages of 60


# ---------------------------------------------------------------- listing: Azure's UTF-16 order


def test_keys_in_utf16_order_are_listed_once_across_page_boundaries(azure, container):
    # List Blobs orders by UTF-16 code units: k/😀 (U+D83D...) before k/！ (U+FF01), unlike code points
    keys = ["k/a", "k/z", "k/😀", "k/😀x", "k/！", "k/！x", "k/～"]
    put_many(azure, container, keys)
    listed = [c["Key"] for c in azure.list_objects_v2(Bucket=container, Prefix="k/")["Contents"]]
    assert listed == keys
    for size in range(1, len(keys) + 1):
        fresh = AzureStore(azure.client)
        assert listed_keys(fresh, container, "k/", MaxKeys=size) == keys  # by token
        by_start_after, after = [], ""
        while True:  # by StartAfter = the last key listed, as reconcile pages, with no marker cached
            page = AzureStore(azure.client).list_objects_v2(
                Bucket=container, Prefix="k/", StartAfter=after, MaxKeys=size
            )
            by_start_after += [c["Key"] for c in page["Contents"]]
            if not page["IsTruncated"]:
                break
            after = by_start_after[-1]
        assert by_start_after == keys, size
    assert leading_shards(AzureStore(azure.client), container, "k/") == ["k/a", "k/z", "k/😀", "k/！", "k/～"]


# ---------------------------------------------------------------- undo and markers


def deleted_with_marker(azure: AzureStore, bucket: str, key: str) -> str:
    azure.put_object(Bucket=bucket, Key=key, Body=b"old-1")
    azure.put_object(Bucket=bucket, Key=key, Body=b"old-2")
    outcome = delete_objects_in_batches(azure, bucket, [key], versioned=True)
    return outcome.markers[key]


def test_removing_a_marker_never_overwrites_a_key_written_since_it_was_read(azure, versioned_container, monkeypatch):
    bucket = versioned_container
    marker = deleted_with_marker(azure, bucket, "u/a")
    original = AzureStore.source_url

    def read_then_written(self, *args):
        azure.put_object(Bucket=bucket, Key="u/a", Body=b"new")  # written by another between the read and the copy
        return original(self, *args)

    monkeypatch.setattr(AzureStore, "source_url", read_then_written)
    answer = azure.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "u/a", "VersionId": marker}], "Quiet": False}
    )
    monkeypatch.undo()
    assert answer["Errors"] == [] and [d["Key"] for d in answer["Deleted"]] == ["u/a"]
    assert azure.get_object(Bucket=bucket, Key="u/a")["Body"].read() == b"new"


def test_delete_copies_purges_a_copy_with_no_current_version_and_its_marker(azure, versioned_container):
    bucket = versioned_container
    deleted_with_marker(azure, bucket, "q/a")
    assert delete_copies(azure, bucket, ["q/a"], versioned=True) == {}
    pages = list(azure.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="q/"))
    assert [e for p in pages for e in p["Versions"] + p["DeleteMarkers"]] == []
    assert listed_keys(azure, bucket, "q/") == []


def test_a_marker_sent_before_its_versions_in_one_request_brings_nothing_back(azure, versioned_container):
    bucket = versioned_container
    marker = deleted_with_marker(azure, bucket, "q/b")
    pages = list(azure.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="q/"))
    versions = [{"Key": "q/b", "VersionId": v["VersionId"]} for p in pages for v in p["Versions"]]
    objects = [{"Key": "q/b", "VersionId": marker}, *versions]
    answer = azure.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": False})
    assert answer["Errors"] == []
    assert sorted(d.get("VersionId") for d in answer["Deleted"]) == sorted(o["VersionId"] for o in objects)
    assert listed_keys(azure, bucket, "q/") == []
    pages = list(azure.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix="q/"))
    assert [e for p in pages for e in p["Versions"] + p["DeleteMarkers"]] == []


def test_a_failed_marker_removal_is_reported_for_its_key_and_the_other_deletes_still_answered(
    azure, versioned_container, monkeypatch
):
    bucket = versioned_container
    marker = deleted_with_marker(azure, bucket, "m/a")
    azure.put_object(Bucket=bucket, Key="m/b", Body=b"x")

    def unreachable(self, *args):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    monkeypatch.setattr(AzureStore, "remove_marker", unreachable)
    answer = azure.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "m/b"}, {"Key": "m/a", "VersionId": marker}], "Quiet": False}
    )
    assert [d["Key"] for d in answer["Deleted"]] == ["m/b"]
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("m/a", "InternalError")]
    assert listed_keys(azure, bucket, "m/") == []


# ---------------------------------------------------------------- deletes only of what was read


def written_after_read(monkeypatch, azure: AzureStore, bucket: str, key: str) -> None:
    """Make the adapter's read of current versions be followed by another writer's write of `key`."""
    original = AzureStore.current_versions

    def read_then_written(self, b, keys):
        found = original(self, b, keys)
        azure.put_object(Bucket=bucket, Key=key, Body=b"new")
        return found

    monkeypatch.setattr(AzureStore, "current_versions", read_then_written)


def test_a_versioned_delete_of_a_key_written_since_its_read_fails_precondition_and_keeps_it(
    azure, versioned_container, monkeypatch
):
    bucket = versioned_container
    azure.put_object(Bucket=bucket, Key="w/a", Body=b"old")
    written_after_read(monkeypatch, azure, bucket, "w/a")
    answer = azure.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "w/a"}], "Quiet": False})
    monkeypatch.undo()
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("w/a", "PreconditionFailed")]
    assert answer["Deleted"] == []
    assert azure.get_object(Bucket=bucket, Key="w/a")["Body"].read() == b"new"


def test_deleting_the_current_version_id_of_a_key_written_since_its_read_fails_precondition(
    azure, versioned_container, monkeypatch
):
    bucket = versioned_container
    version = azure.put_object(Bucket=bucket, Key="w/b", Body=b"old")["VersionId"]
    written_after_read(monkeypatch, azure, bucket, "w/b")
    answer = azure.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "w/b", "VersionId": version}], "Quiet": False}
    )
    monkeypatch.undo()
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [("w/b", "PreconditionFailed")]
    assert azure.get_object(Bucket=bucket, Key="w/b")["Body"].read() == b"new"


# ---------------------------------------------------------------- GET's body


@pytest.mark.parametrize("failure", [ServiceResponseError("reset"), IncompleteReadError(message="cut short")])
def test_a_transport_failure_while_reading_a_body_raises_endpoint_connection_error(
    azure, container, monkeypatch, failure
):
    azure.put_object(Bucket=container, Key="body", Body=b"x" * 1000)

    def broken(self):
        yield b"x" * 10
        raise failure

    monkeypatch.setattr(StorageStreamDownloader, "chunks", broken)
    body = azure.get_object(Bucket=container, Key="body")["Body"]
    with pytest.raises(EndpointConnectionError):
        body.read()
