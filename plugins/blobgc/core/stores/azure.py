"""Azure Blob Storage behind `blobgc.core.objects.ObjectStore`: S3's calls, keyword arguments, shapes and error codes.

A bucket is a container. `AzureStore` wraps a `BlobServiceClient` (the Airflow layer builds it from `WasbHook`):
- Listing is List Blobs (`prefix`, `delimiter`, `maxresults`, `marker`), in Azure's key order: UTF-16 code units
  (the REST docs say only "alphabetical order"; writing every character shows UTF-16 order,
  https://github.com/blobfile/blobfile/pull/238, and Azurite's JavaScript strings sort so). Azure has no StartAfter:
  NextContinuationToken is the adapter's own (Azure's marker and the last key returned), also kept in a small LRU
  cache under that last key, so a page that follows by token or by StartAfter = its last key resumes where the
  other ended. Any other StartAfter lists from the prefix's start in pages of 5000 and skips, in the listing's own
  sequence, through StartAfter's entry or to the first name above it in UTF-16 order (never an empty page reported
  as truncated): a call costs O(keys / 5000) requests whatever its MaxKeys.
- ETag: the blob's Content-MD5 as quoted lowercase hex, which a server-side copy keeps; a blob without one (uploaded
  as blocks with no MD5) reports Azure's own ETag and HEAD adds `"ETagIsMD5": False`.
- `delete_objects` sends Blob Batch requests (https://learn.microsoft.com/rest/api/storageservices/blob-batch), 256
  deletes per batch, `batch_concurrency` batches at a time, and answers S3's `Deleted`/`Errors`. Per-key codes:
  BlobNotFound -> NoSuchKey, a lease or an immutability policy or 403 -> AccessDenied, 429/503 -> SlowDown,
  other 5xx -> InternalError, 412 -> PreconditionFailed. A batch request that fails as a whole raises.
- `copy_object` is Copy Blob (https://learn.microsoft.com/rest/api/storageservices/copy-blob), waited for while
  pending: CopySourceIfMatch is checked against the ETag this adapter reports for the source, then the copy is sent
  with `x-ms-source-if-match` on the source's native ETag, so a source written again between the two is refused
  (PreconditionFailed, 412). One Copy Blob copies any block blob: `single_copy_limit` is 5 TiB and the multipart
  calls raise NotImplementedError.
- Errors: every Azure error becomes a botocore `ClientError` (S3's code, the HTTP status), a transport failure an
  `EndpointConnectionError`; the SDK's own retries stay on.

Versioning (https://learn.microsoft.com/azure/storage/blobs/versioning-overview) is a storage-account setting that
the data plane cannot read. `get_bucket_versioning` answers the `versioning` given to the constructor (the
connection's extra `versioning: true|false`); without it, it observes the container: "Enabled" when a listing with
`include=versions` shows a version id on the container's first blob, else `{}` (an empty container, or blobs
written before versioning was turned on, read as unversioned). S3's versions and delete markers map onto it so:
- a blob version is an S3 version (VersionId = Azure's version id, IsLatest = `IsCurrentVersion`);
- Azure keeps no delete marker: deleting the current version only makes it a previous one. For a key with versions
  and no current version, `list_object_versions` synthesizes ONE delete marker, VersionId
  `"deleted:<newest version id>"`, LastModified that version's; a versioned delete (Quiet false) answers
  `DeleteMarker: True, DeleteMarkerVersionId` with the same token (the deleted blob's version id, read by HEAD);
- deleting that marker copies the newest version back as the current blob (Copy Blob from the version's URL, with
  If-None-Match: * so a key written since is live again and never overwritten), as removing S3's marker brings the
  object back; a marker whose key has no version left, or whose versions the same request deletes, is reported
  removed and nothing comes back. A real VersionId deletes that version for good (the current version is first made
  a previous one, If-Match on the ETag read, as S3 deletes a latest version); a versioned delete of a key reads its
  current version first and deletes it only as read (If-Match), so a write in between fails that key with
  PreconditionFailed and it stays owed.
Lifecycle management policies are also an account (management-plane) setting: `get_bucket_lifecycle_configuration`
answers S3's rule for the `noncurrent_days` given (the connection's extra `noncurrent_version_days`), else
NoSuchLifecycleConfiguration.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from itertools import groupby
from typing import Any
from urllib.parse import quote

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    IncompleteReadError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobClient, BlobProperties, BlobServiceClient, ContainerClient, ContentSettings
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from blobgc.core.stores import OneCallCopies

BATCH_LIMIT = 256  # sub-requests in one Blob Batch request
DELETE_LIMIT = 1000  # keys in one DeleteObjects call, as S3
MARKER_PREFIX = "deleted:"
PRECONDITION_CODES = frozenset({"ConditionNotMet", "SourceConditionNotMet", "TargetConditionNotMet"})
DENIED_CODES = frozenset(
    {
        "BlobImmutableDueToPolicy",
        "BlobImmutableDueToLegalHold",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
    }
)
RESUME_CACHE = 512  # listing markers kept to continue after a page's last key
SKIP_PAGE = 5000  # List Blobs' largest page: the page size used to skip to a StartAfter
TOKEN_PREFIX = "blobgc-azure:"  # the adapter's own continuation tokens: an Azure marker and a key to skip through
HIGHEST = "\U0010ffff"  # blobgc.core.objects.HIGHEST: a character after every character of a real key
COPY_POLL = 0.2  # seconds between two reads of a pending copy's status


def client_error(operation: str, status: int, code: str, message: str) -> ClientError:
    """botocore's ClientError with S3's error code and the HTTP status."""
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


def s3_code(status: int, azure_code: str, not_found: str = "NoSuchKey") -> str:
    """The S3 error code for an Azure error (status and `x-ms-error-code`)."""
    if azure_code in PRECONDITION_CODES:
        return "PreconditionFailed"
    if azure_code.startswith("Lease") or azure_code in DENIED_CODES or status == 403:
        return "AccessDenied"
    if azure_code == "ContainerNotFound":
        return "NoSuchBucket"
    if status == 404:
        return not_found
    if status in (429, 503):
        return "SlowDown"
    if status >= 500:
        return "InternalError"
    if status == 412:
        return "PreconditionFailed"
    return azure_code or str(status)


def s3_etag(md5: bytes | bytearray | None, etag: str | None) -> str:
    """The ETag S3 would report: the quoted MD5 hex when the blob has one, else Azure's ETag, quoted."""
    if md5:
        return f'"{bytes(md5).hex()}"'
    native = etag or ""
    return native if native.startswith('"') else f'"{native}"'


@dataclass(frozen=True)
class Removal:
    """One sub-request of a batch delete: a key, and the version to delete (None: the current version)."""

    key: str
    version: str | None
    etag: str | None = None  # the native ETag read: deleted only if it is still that one (If-Match)


class BlobBody:
    """A blob's bytes as boto3's StreamingBody gives them: `read(amt)`, streamed from the download's chunks."""

    def __init__(self, chunks: Iterator[bytes], translated: Callable[[str], AbstractContextManager[None]]) -> None:
        self._chunks = chunks
        self._translated = translated
        self._buffer = b""

    def read(self, amt: int | None = None) -> bytes:
        """Up to `amt` bytes (all that is left when None); a transport failure is EndpointConnectionError."""
        while amt is None or len(self._buffer) < amt:
            with self._translated("GetObject"):
                chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        if amt is None:
            data, self._buffer = self._buffer, b""
        else:
            data, self._buffer = self._buffer[:amt], self._buffer[amt:]
        return data

    def iter_chunks(self, chunk_size: int = 1024 * 1024) -> Iterator[bytes]:
        while data := self.read(chunk_size):
            yield data

    def close(self) -> None:
        self._buffer = b""


class ObjectsPaginator:
    """`get_paginator("list_objects_v2")`: pages that follow NextContinuationToken."""

    def __init__(self, store: AzureStore) -> None:
        self._store = store

    def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        kwargs.pop("PaginationConfig", None)
        token: str | None = None
        while True:
            page = self._store.list_objects_v2(**({**kwargs, "ContinuationToken": token} if token else kwargs))
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return


class VersionsPaginator:
    """`get_paginator("list_object_versions")`: pages of Versions and DeleteMarkers (see the module docstring)."""

    def __init__(self, store: AzureStore) -> None:
        self._store = store

    def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield from self._store.version_pages(kwargs["Bucket"], kwargs.get("Prefix") or "")


class AzureStore(OneCallCopies):
    """Azure Blob Storage as blobgc's ObjectStore (see the module docstring)."""

    copy_call = "Copy Blob"  # single_copy_limit: OneCallCopies's 5 TiB

    def __init__(
        self,
        client: BlobServiceClient,
        *,
        versioning: bool | None = None,
        noncurrent_days: int | None = None,
        batch_concurrency: int = 4,
    ) -> None:
        self.client = client
        self.versioning = versioning
        self.noncurrent_days = noncurrent_days
        self.batch_concurrency = batch_concurrency
        self._resume: OrderedDict[tuple[str, str, str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    # errors

    @contextmanager
    def translated(self, operation: str, not_found: str = "NoSuchKey") -> Iterator[None]:
        """Raise Azure's errors as botocore's: ClientError with S3's code, EndpointConnectionError."""
        try:
            yield
        except (ServiceRequestError, ServiceResponseError, IncompleteReadError) as error:  # a body cut short: transport
            raise EndpointConnectionError(endpoint_url=self.client.url, error=error) from error
        except HttpResponseError as error:
            status = int(error.status_code or 500)
            code = s3_code(status, str(getattr(error, "error_code", "") or ""), not_found)
            raise client_error(operation, status, code, str(error.reason or error.message)[:500]) from error
        except AzureError as error:
            raise client_error(operation, 500, "InternalError", str(error)[:500]) from error

    def container(self, bucket: str) -> ContainerClient:
        return self.client.get_container_client(bucket)

    def blob(self, bucket: str, key: str, version: str | None = None) -> BlobClient:
        return self.client.get_blob_client(bucket, key, version_id=version)

    def source_url(self, bucket: str, key: str, version: str | None = None) -> str:
        """The URL Copy Blob reads from: the blob's, or its version's (`versionid`)."""
        url = self.blob(bucket, key).url
        if version:
            url += ("&" if "?" in url else "?") + "versionid=" + quote(version, safe="")
        return url

    # listing

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]:
        return self.list_objects_v2_call(**kwargs)

    def list_objects_v2_call(
        self,
        *,
        Bucket: str,
        Prefix: str = "",
        StartAfter: str = "",
        ContinuationToken: str | None = None,
        MaxKeys: int = 1000,
        Delimiter: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        """A page of List Blobs in S3's shape (see the module docstring for StartAfter and continuation)."""
        limit = max(1, min(int(MaxKeys), 5000))
        where = (Bucket, Prefix or "", Delimiter or "")
        marker, after = None, ""
        if ContinuationToken:
            marker, after = read_token(ContinuationToken)
        elif StartAfter:
            with self._lock:
                cached = self._resume.get((*where, StartAfter))
            marker, after = read_token(cached) if cached else (None, StartAfter)
        passed = not after  # in the listing's own sequence: past `after` (its own entry, or the first one above it)
        contents: list[dict[str, Any]] = []
        prefixes: list[dict[str, str]] = []
        token: str | None = None
        last = ""
        while True:
            token = None
            items, following = self.list_page(Bucket, Prefix, Delimiter, marker, limit if passed else SKIP_PAGE)
            for item in items:
                if not passed:
                    if item.name == after:
                        passed = True
                        continue
                    if listing_order(item.name) <= listing_order(after):
                        continue
                    passed = True
                if len(contents) + len(prefixes) == limit:  # the page is full: the next one reads this one again
                    token = make_token(marker, last)
                    break
                last = item.name
                if isinstance(item, BlobProperties):
                    contents.append(listed(item))
                else:
                    prefixes.append({"Prefix": item.name})
            else:
                if following:
                    token = make_token(following, "")
            if token is None or contents or prefixes:
                break
            marker = following
        page: dict[str, Any] = {
            "Name": Bucket,
            "Prefix": Prefix,
            "MaxKeys": limit,
            "KeyCount": len(contents) + len(prefixes),
            "IsTruncated": token is not None,
            "Contents": contents,
        }
        if Delimiter:
            page["Delimiter"], page["CommonPrefixes"] = Delimiter, prefixes
        if token is not None:
            page["NextContinuationToken"] = token
            with self._lock:
                self._resume[(*where, last)] = token
                while len(self._resume) > RESUME_CACHE:
                    self._resume.popitem(last=False)
        return page

    def list_page(
        self, bucket: str, prefix: str, delimiter: str | None, marker: str | None, limit: int
    ) -> tuple[list[Any], str | None]:
        """One List Blobs call: its blobs (and BlobPrefix entries with a delimiter) and the next marker."""
        container = self.container(bucket)
        with self.translated("ListObjectsV2", "NoSuchBucket"):
            if delimiter:
                pages = container.walk_blobs(
                    name_starts_with=prefix or None, delimiter=delimiter, results_per_page=limit
                ).by_page(continuation_token=marker)
            else:
                pages = container.list_blobs(name_starts_with=prefix or None, results_per_page=limit).by_page(
                    continuation_token=marker
                )
            page = next(pages, None)
            items = list(page) if page is not None else []
            return items, (pages.continuation_token or None)  # type: ignore[attr-defined]

    def get_paginator(self, operation_name: str) -> ObjectsPaginator | VersionsPaginator:
        if operation_name == "list_objects_v2":
            return ObjectsPaginator(self)
        if operation_name == "list_object_versions":
            return VersionsPaginator(self)
        raise NotImplementedError(f"Azure Blob Storage has no paginator {operation_name} in blobgc's adapter")

    def version_pages(self, bucket: str, prefix: str, keys_per_page: int = 1000) -> Iterator[dict[str, Any]]:
        """List Blobs with versions, as S3's ListObjectVersions pages (a key's versions never split across pages)."""
        container = self.container(bucket)
        page: dict[str, Any] = {"Versions": [], "DeleteMarkers": [], "IsTruncated": False}
        keys = 0
        with self.translated("ListObjectVersions", "NoSuchBucket"):
            listing = container.list_blobs(name_starts_with=prefix or None, include=["versions"])
            for key, group in groupby(listing, key=lambda b: str(b.name)):
                versions, markers = key_versions(key, list(group))
                page["Versions"] += versions
                page["DeleteMarkers"] += markers
                keys += 1
                if keys == keys_per_page:
                    yield {**page, "IsTruncated": True}
                    page, keys = {"Versions": [], "DeleteMarkers": [], "IsTruncated": False}, 0
        yield page

    # objects

    def head_object(self, **kwargs: Any) -> dict[str, Any]:
        return self.head_object_call(**kwargs)

    def head_object_call(self, *, Bucket: str, Key: str, VersionId: str | None = None, **_: Any) -> dict[str, Any]:
        """Get Blob Properties as S3's HEAD; a missing blob is ClientError "404"."""
        if VersionId and VersionId.startswith(MARKER_PREFIX):
            raise client_error("HeadObject", 405, "MethodNotAllowed", "the version is a delete marker")
        version = VersionId if VersionId and VersionId != "null" else None
        with self.translated("HeadObject", "404"):
            props = self.blob(Bucket, Key, version).get_blob_properties()
        return headed(props)

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        return self.get_object_call(**kwargs)

    def get_object_call(self, *, Bucket: str, Key: str, VersionId: str | None = None, **_: Any) -> dict[str, Any]:
        """Download Blob: the head's fields and a Body streamed chunk by chunk."""
        version = VersionId if VersionId and VersionId != "null" else None
        with self.translated("GetObject"):
            download = self.blob(Bucket, Key, version).download_blob()
        answer = headed(download.properties)
        answer["Body"] = BlobBody(iter(download.chunks()), self.translated)
        return answer

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        return self.put_object_call(**kwargs)

    def put_object_call(
        self,
        *,
        Bucket: str,
        Key: str,
        Body: Any = b"",
        ContentType: str | None = None,
        Metadata: dict[str, str] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        """Put Blob (Put Block List for large bodies), overwriting."""
        settings = ContentSettings(content_type=ContentType) if ContentType else None
        with self.translated("PutObject"):
            done = self.blob(Bucket, Key).upload_blob(
                Body, overwrite=True, content_settings=settings, metadata=dict(Metadata or {}) or None
            )
        answer: dict[str, Any] = {"ETag": s3_etag(done.get("content_md5"), done.get("etag"))}
        if done.get("version_id"):
            answer["VersionId"] = done["version_id"]
        return answer

    def copy_object(self, **kwargs: Any) -> dict[str, Any]:
        return self.copy_object_call(**kwargs)

    def copy_object_call(
        self,
        *,
        Bucket: str,
        Key: str,
        CopySource: dict[str, str] | str,
        CopySourceIfMatch: str | None = None,
        MetadataDirective: str = "COPY",
        Metadata: dict[str, str] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        """Copy Blob from the source (or its version), conditional on the source's ETag (see the module docstring)."""
        if isinstance(CopySource, str):
            source_bucket, _slash, source_key = CopySource.lstrip("/").partition("/")
            source_version = None
        else:
            source_bucket, source_key = CopySource["Bucket"], CopySource["Key"]
            source_version = CopySource.get("VersionId")
        conditions: dict[str, Any] = {}
        if CopySourceIfMatch:
            with self.translated("CopyObject"):
                source = self.blob(source_bucket, source_key, source_version).get_blob_properties()
            if s3_etag(source.content_settings.content_md5, source.etag).strip('"') != CopySourceIfMatch.strip('"'):
                raise client_error("CopyObject", 412, "PreconditionFailed", "the source's ETag is another")
            conditions = {"source_etag": source.etag, "source_match_condition": MatchConditions.IfNotModified}
        metadata = dict(Metadata or {}) if MetadataDirective == "REPLACE" else None
        target = self.blob(Bucket, Key)
        with self.translated("CopyObject"):
            props = self.copied(
                target, self.source_url(source_bucket, source_key, source_version), metadata=metadata, **conditions
            )
        answer: dict[str, Any] = {
            "CopyObjectResult": {
                "ETag": s3_etag(props.content_settings.content_md5, props.etag),
                "LastModified": props.last_modified,
            }
        }
        if props.version_id:
            answer["VersionId"] = props.version_id
        return answer

    # deletion

    def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
        return self.delete_objects_call(**kwargs)

    def delete_objects_call(self, *, Bucket: str, Delete: dict[str, Any], **_: Any) -> dict[str, Any]:
        """DeleteObjects through Blob Batch, answered in S3's shape (see the module docstring)."""
        objects: list[dict[str, str]] = list(Delete.get("Objects") or [])
        quiet = bool(Delete.get("Quiet"))
        if len(objects) > DELETE_LIMIT:
            raise client_error("DeleteObjects", 400, "MalformedXML", f"more than {DELETE_LIMIT} keys")
        plain = [o["Key"] for o in objects if o.get("VersionId") in (None, "", "null")]
        markers = [(o["Key"], o["VersionId"]) for o in objects if str(o.get("VersionId", "")).startswith(MARKER_PREFIX)]
        versions = [
            Removal(o["Key"], o["VersionId"])
            for o in objects
            if o.get("VersionId") not in (None, "", "null") and not o["VersionId"].startswith(MARKER_PREFIX)
        ]
        deleted: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []

        def failed(key: str, version: str | None, code: str, message: str) -> None:
            error = {"Key": key, "Code": code, "Message": message}
            if version:
                error["VersionId"] = version
            errors.append(error)

        # a versioned delete answers its marker: the current version is read first, and deleted only as read (If-Match)
        current = self.current_versions(Bucket, plain) if plain and not quiet and self.is_versioned(Bucket) else None
        removals: list[Removal] = []
        for key in plain:
            if current is not None and key not in current:
                failed(key, None, "NoSuchKey", "The specified blob does not exist.")
            else:
                removals.append(Removal(key, None, current[key][1] if current is not None else None))
        if versions:
            # the current version is deleted by version id as S3 deletes a latest version: made a previous one first,
            # only as it was read (If-Match), so a write since fails that key and its bytes stay
            latest = self.current_versions(Bucket, sorted({r.key for r in versions}))
            first = [
                Removal(r.key, None, latest[r.key][1]) for r in versions if latest.get(r.key, ("",))[0] == r.version
            ]
            refused = {}
            for removal, status, code, message in self.batch_delete(Bucket, first):
                if status >= 300 and status != 404:
                    refused[removal.key] = (s3_code(status, code), message)
            for r in versions:
                if r.key in refused:
                    failed(r.key, r.version, *refused[r.key])
                else:
                    removals.append(r)
        for removal, status, code, message in self.batch_delete(Bucket, removals):
            if status < 300:
                done: dict[str, Any] = {"Key": removal.key}
                if removal.version:
                    done["VersionId"] = removal.version
                elif current is not None:
                    done.update(DeleteMarker=True, DeleteMarkerVersionId=MARKER_PREFIX + current[removal.key][0])
                deleted.append(done)
            else:
                not_found = "NoSuchVersion" if removal.version else "NoSuchKey"
                failed(removal.key, removal.version, s3_code(status, code, not_found), message)
        purged = {r.key for r in versions}
        for key, token in markers:
            marker_done = {"Key": key, "VersionId": token, "DeleteMarker": True, "DeleteMarkerVersionId": token}
            if key in purged:  # its versions go in the same request: the marker goes with them, nothing comes back
                deleted.append(marker_done)
                continue
            try:
                self.remove_marker(Bucket, key)
                deleted.append(marker_done)
            except ClientError as failure:
                err = failure.response["Error"]
                failed(key, token, str(err.get("Code") or "InternalError"), str(err.get("Message") or ""))
            except (BotoCoreError, AzureError) as failure:  # the deletes already done are still answered
                failed(key, token, "InternalError", str(failure)[:500])
        answer: dict[str, Any] = {"Errors": errors}
        if not quiet:
            answer["Deleted"] = deleted
        return answer

    def batch_delete(self, bucket: str, removals: Sequence[Removal]) -> list[tuple[Removal, int, str, str]]:
        """Delete through Blob Batch, 256 a request, `batch_concurrency` requests at a time: (removal, status,
        x-ms-error-code, message) per sub-request; a request that fails as a whole raises."""
        container = self.container(bucket)

        def one(chunk: list[Removal]) -> list[tuple[Removal, int, str, str]]:
            blobs = [sub_request(r) for r in chunk]
            with self.translated("DeleteObjects", "NoSuchBucket"):
                responses = list(container.delete_blobs(*blobs, raise_on_any_failure=False))
            return [
                (r, int(answer.status_code), str(answer.headers.get("x-ms-error-code") or ""), str(answer.reason or ""))
                for r, answer in zip(chunk, responses, strict=True)
            ]

        chunks = [list(removals[i : i + BATCH_LIMIT]) for i in range(0, len(removals), BATCH_LIMIT)]
        if len(chunks) > 1 and self.batch_concurrency > 1:
            with ThreadPoolExecutor(min(self.batch_concurrency, len(chunks))) as pool:
                parts = list(pool.map(one, chunks))
        else:
            parts = [one(chunk) for chunk in chunks]
        return [outcome for part in parts for outcome in part]

    def current_versions(self, bucket: str, keys: Iterable[str]) -> dict[str, tuple[str, str]]:
        """(version id, native ETag) of each key's current version, for the keys that have one (HEAD, 16 at a
        time)."""

        def one(key: str) -> tuple[str, tuple[str, str] | None]:
            try:
                with self.translated("HeadObject", "404"):
                    props = self.blob(bucket, key).get_blob_properties()
            except ClientError as error:
                if error.response["Error"]["Code"] == "404":
                    return key, None
                raise
            return key, (str(props.version_id or ""), str(props.etag or ""))

        wanted = list(keys)
        if not wanted:
            return {}
        with ThreadPoolExecutor(max(1, min(16, len(wanted)))) as pool:
            return {key: found for key, found in pool.map(one, wanted) if found}

    def remove_marker(self, bucket: str, key: str) -> None:
        """Bring `key` back from its newest version (Copy Blob from the version's URL, only while no blob is there:
        If-None-Match *); a key with a current version, or none left, has no marker left to remove."""
        if self.current_versions(bucket, [key]):
            return  # a current version exists: no marker is left over it
        with self.translated("DeleteObjects", "NoSuchBucket"):
            found = [b for b in self.container(bucket).list_blobs(name_starts_with=key, include=["versions"])]
        found = [b for b in found if b.name == key]
        if any(b.is_current_version or not b.version_id for b in found):
            return  # written again since: live, no marker left
        versions = sorted(str(b.version_id) for b in found)
        if not versions:
            return  # no version left: the marker went with the last one
        target = self.blob(bucket, key)
        try:
            with self.translated("DeleteObjects"):
                self.copied(
                    target,
                    self.source_url(bucket, key, versions[-1]),
                    match_condition=MatchConditions.IfMissing,  # If-None-Match: * (the SDK takes no etag for it)
                )
        except ClientError as error:
            if error.response["ResponseMetadata"]["HTTPStatusCode"] in (409, 412):
                return  # written again since it was read: live again, and never overwritten with older bytes
            raise

    def copied(self, target: BlobClient, source: str, **kwargs: Any) -> BlobProperties:
        """Copy Blob into `target`, waited for while pending: the copy's properties (call inside `translated`)."""
        copy = target.start_copy_from_url(source, **kwargs)
        status = str(copy.get("copy_status") or "pending")
        while status == "pending":
            time.sleep(COPY_POLL)
            status = str(target.get_blob_properties().copy.status or "success")
        if status != "success":
            raise client_error("CopyObject", 500, "InternalError", f"Copy Blob ended {status}")
        return target.get_blob_properties()

    # bucket settings

    def is_versioned(self, bucket: str) -> bool:
        return self.get_bucket_versioning(Bucket=bucket).get("Status") == "Enabled"

    def get_bucket_versioning(self, **kwargs: Any) -> dict[str, Any]:
        return self.get_bucket_versioning_call(**kwargs)

    def get_bucket_versioning_call(self, *, Bucket: str, **_: Any) -> dict[str, Any]:
        """ "Enabled" or {} (see the module docstring: the connection's setting, or observed on the first blob)."""
        if self.versioning is not None:
            return {"Status": "Enabled"} if self.versioning else {}
        with self.translated("GetBucketVersioning", "NoSuchBucket"):
            pages = self.container(Bucket).list_blobs(include=["versions"], results_per_page=1).by_page()
            first = next(pages, None)
            blobs = list(first) if first is not None else []
        return {"Status": "Enabled"} if any(b.version_id for b in blobs[:1]) else {}

    def get_bucket_lifecycle_configuration(self, **kwargs: Any) -> dict[str, Any]:
        return self.get_bucket_lifecycle_configuration_call(**kwargs)

    def get_bucket_lifecycle_configuration_call(self, *, Bucket: str, **_: Any) -> dict[str, Any]:
        """The noncurrent-version rule the connection names, in S3's shape, else NoSuchLifecycleConfiguration."""
        if self.noncurrent_days is None:
            raise client_error(
                "GetBucketLifecycleConfiguration",
                404,
                "NoSuchLifecycleConfiguration",
                "Azure's lifecycle management policy is an account setting the data plane cannot read",
            )
        rule = {
            "ID": "noncurrent-versions",
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "NoncurrentVersionExpiration": {"NoncurrentDays": self.noncurrent_days},
        }
        return {"Rules": [rule]}


def listed(blob: BlobProperties) -> dict[str, Any]:
    """A List Blobs entry as ListObjectsV2's Contents entry."""
    return {
        "Key": blob.name,
        "Size": int(blob.size or 0),
        "LastModified": blob.last_modified,
        "ETag": s3_etag(blob.content_settings.content_md5, blob.etag),
        "StorageClass": str(blob.blob_tier or "STANDARD"),
    }


def headed(props: BlobProperties) -> dict[str, Any]:
    """Blob properties as HeadObject's answer."""
    answer: dict[str, Any] = {
        "ContentLength": int(props.size or 0),
        "LastModified": props.last_modified,
        "ETag": s3_etag(props.content_settings.content_md5, props.etag),
        "Metadata": dict(props.metadata or {}),
        "ContentType": props.content_settings.content_type or "application/octet-stream",
    }
    if not props.content_settings.content_md5:
        answer["ETagIsMD5"] = False
    if props.version_id:
        answer["VersionId"] = props.version_id
    return answer


def key_versions(key: str, blobs: list[BlobProperties]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One key's entries of a versions listing: its versions, newest first, and the delete marker synthesized over
    them when it has no current version."""
    versions = sorted(blobs, key=lambda b: str(b.version_id or ""), reverse=True)
    entries = [
        {
            "Key": key,
            "VersionId": b.version_id or "null",
            "IsLatest": bool(b.is_current_version) or b.version_id is None,
            "LastModified": b.last_modified,
            "Size": int(b.size or 0),
            "ETag": s3_etag(b.content_settings.content_md5, b.etag),
        }
        for b in versions
    ]
    if not entries or any(e["IsLatest"] for e in entries):
        return entries, []
    newest = versions[0]
    marker = {
        "Key": key,
        "VersionId": MARKER_PREFIX + str(newest.version_id),
        "IsLatest": True,
        "LastModified": newest.last_modified,
    }
    return entries, [marker]


def listing_order(name: str) -> bytes:
    """A name's place in List Blobs' order, UTF-16 code units (Azure's and Azurite's: see the module docstring); the
    core's HIGHEST is read as the highest code unit, so `key + HIGHEST` stays above every key starting with `key`."""
    return name.replace(HIGHEST, "\uffff\uffff").encode("utf-16-be", "surrogatepass")


def make_token(marker: str | None, after: str) -> str:
    """The adapter's continuation token: list from Azure's `marker` (None: the prefix's start), past the key `after`."""
    return TOKEN_PREFIX + base64.urlsafe_b64encode(json.dumps([marker, after]).encode()).decode()


def read_token(token: str) -> tuple[str | None, str]:
    """(Azure marker, key to skip through) of a continuation token (a bare Azure marker is taken as one)."""
    if not token.startswith(TOKEN_PREFIX):
        return token, ""
    marker, after = json.loads(base64.urlsafe_b64decode(token[len(TOKEN_PREFIX) :].encode()))
    return (str(marker) if marker else None), str(after)


def sub_request(removal: Removal) -> str | dict[str, Any]:
    """One Delete Blob of a Blob Batch: the blob, its version, and If-Match on the ETag read."""
    if not removal.version and not removal.etag:
        return removal.key
    blob: dict[str, Any] = {"name": removal.key}
    if removal.version:
        blob["version_id"] = removal.version
    if removal.etag:
        blob.update(etag=removal.etag, match_condition=MatchConditions.IfNotModified)
    return blob
