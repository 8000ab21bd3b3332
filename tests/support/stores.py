"""The local stack's three object stores, as the tests of other stores (issue 33) use them.

Each store is reached as blobgc reaches it, through its Airflow connection (`store_client`: the S3 client of
`blobgc_s3`, `GcsStore` of `blobgc_gcs`, `AzureStore` of `blobgc_azure`). What blobgc never does itself is done
here through each cloud's own SDK against the same local server: creating a versioned bucket or container, and
making one object undeletable (an S3 bucket policy, a GCS temporary hold, an Azure lease), as a real bucket's
owner might.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import socket
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from tests.helpers import deny_deletes

CONN_IDS = {"s3": "blobgc_s3", "gcs": "blobgc_gcs", "azure": "blobgc_azure"}
ENDPOINTS = {"s3": "BLOBGC_S3_ENDPOINT", "gcs": "BLOBGC_GCS_ENDPOINT", "azure": "BLOBGC_AZURE_ENDPOINT"}


def endpoint(kind: str) -> str:
    """The local server of store `kind`; a stack without it fails the test loudly (`make up` starts all three)."""
    name = ENDPOINTS[kind]
    if not os.environ.get(name):
        raise RuntimeError(f"{name} is not set: source .blobgc/env after `make up`, which starts every store")
    return os.environ[name]


@functools.cache
def server_script(kind: str) -> Any:
    """scripts/<kind>_server.py as a module (its ensure_buckets, its constants), as scripts/stack.py loads it."""
    path = Path(__file__).resolve().parents[2] / "scripts" / f"{kind}_server.py"
    spec = importlib.util.spec_from_file_location(f"blobgc_{kind}_server", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def server_endpoint(kind: str) -> str:
    """The local server of store `kind`, which must answer: `make up` starts it; the tests never skip."""
    import pytest

    url = endpoint(kind)
    parts = urllib.parse.urlparse(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=1).close()
    except OSError:
        pytest.fail(f"nothing answers at {url}: `make up` starts the local {kind} server (.blobgc/logs/{kind}.log)")
    return url


def gcs_native() -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="blobgc-local", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": endpoint("gcs")})


def azure_native() -> Any:
    from azure.storage.blob import BlobServiceClient

    extra = json.loads(os.environ["AIRFLOW_CONN_BLOBGC_AZURE"])["extra"]
    return BlobServiceClient.from_connection_string(extra["connection_string"])


@dataclass
class Store:
    """One store of the stack, with a versioned bucket (container) of the test's own."""

    kind: str
    client: Any  # the ObjectStore blobgc uses
    bucket: str

    @property
    def conn_id(self) -> str:
        return CONN_IDS[self.kind]

    def keys(self, prefix: str = "") -> set[str]:
        return {o["Key"] for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                                            Prefix=prefix)
                for o in page.get("Contents", [])}

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def backdate(self, key: str, seconds: float) -> None:
        """Make an object old the honest way (docs/reference.md §1), through the store's local server."""
        query = urllib.parse.urlencode({"bucket": self.bucket, "key": key, "seconds": seconds})
        base = endpoint(self.kind)
        if self.kind == "azure":  # the container's URL is below the account's: the hook lives at the server's root
            base = base.rsplit("/", 1)[0]
        request = urllib.request.Request(f"{base}/_blobgc/backdate?{query}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 200

    def refuse_deletes(self, key: str) -> None:
        """Make `key` undeletable as its cloud allows: a deny policy (S3), a temporary hold (GCS), a lease (Azure)."""
        if self.kind == "s3":
            deny_deletes(self.client, self.bucket, key)
        elif self.kind == "gcs":
            blob = gcs_native().bucket(self.bucket).get_blob(key)
            blob.temporary_hold = True
            blob.patch()
        else:
            azure_native().get_blob_client(self.bucket, key).acquire_lease(lease_duration=-1)

    def allow_deletes(self, key: str) -> None:
        if self.kind == "s3":
            self.client.delete_bucket_policy(Bucket=self.bucket)
        elif self.kind == "gcs":
            blob = gcs_native().bucket(self.bucket).get_blob(key)
            blob.temporary_hold = False
            blob.patch()
        else:
            from azure.storage.blob import BlobLeaseClient

            BlobLeaseClient(azure_native().get_blob_client(self.bucket, key)).break_lease(lease_break_period=0)


def create_bucket(kind: str, client: Any, name: str, versioned: bool = True) -> None:
    """A bucket (container) named `name` in store `kind`, versioned unless not `versioned`. Azure's versioning is an
    account's setting; the local Azure server sets it per container (`PUT /_blobgc/versioning`,
    scripts/azure_server.py), so that one account holds both kinds."""
    if kind == "s3":
        client.create_bucket(Bucket=name)
        if versioned:
            client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    elif kind == "gcs":
        bucket = gcs_native().bucket(name)
        bucket.versioning_enabled = versioned
        bucket.create()
    else:
        azure_native().create_container(name)
        query = urllib.parse.urlencode({"bucket": name, "enabled": "true" if versioned else "false"})
        root = endpoint("azure").rsplit("/", 1)[0]
        with urllib.request.urlopen(urllib.request.Request(f"{root}/_blobgc/versioning?{query}", method="PUT",
                                                           data=b""), timeout=10) as answer:
            assert answer.status in (200, 204)


def remove_bucket(kind: str, name: str) -> None:
    """Best effort: the test's bucket and every version in it."""
    if kind == "gcs":
        bucket = gcs_native().bucket(name)
        for blob in bucket.list_blobs(versions=True):
            try:
                bucket.delete_blob(blob.name, generation=blob.generation)
            except Exception:  # noqa: BLE001 - a held object, say: the emulator's data goes with the stack
                pass
    elif kind == "azure":
        try:
            azure_native().delete_container(name)
        except Exception:  # noqa: BLE001 - a leased blob, say
            pass


def store_of(kind: str, versioned: bool = True) -> Iterator[Store]:
    """A `Store` of kind `kind`, its client from its Airflow connection, and a bucket of its own (versioned unless
    not `versioned`)."""
    from blobgc.dag_kit.connections import store_client

    endpoint(kind)
    client = store_client(CONN_IDS[kind])
    name = f"t{kind}-{uuid.uuid4().hex[:12]}"
    create_bucket(kind, client, name, versioned)
    yield Store(kind, client, name)
    remove_bucket(kind, name)


class StoreCalls:
    """A real client that counts listing pages, the objects they listed, and HEADs; optionally refusing listings."""

    def __init__(self, inner, *, deny_listing: bool = False, deny_head: bool = False):
        self.inner, self.deny_listing, self.deny_head = inner, deny_listing, deny_head
        self.pages = self.listed = self.heads = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def list_objects_v2(self, **kwargs):
        if self.deny_listing:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                               "ResponseMetadata": {"HTTPStatusCode": 403}}, "ListObjectsV2")
        page = self.inner.list_objects_v2(**kwargs)
        self.pages += 1
        self.listed += len(page.get("Contents", []))
        return page

    def head_object(self, **kwargs):
        self.heads += 1
        if self.deny_head:
            raise ClientError({"Error": {"Code": "403", "Message": "Forbidden"},
                               "ResponseMetadata": {"HTTPStatusCode": 403}}, "HeadObject")
        return self.inner.head_object(**kwargs)
