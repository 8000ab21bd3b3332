"""Google Cloud Storage behind blobgc's `ObjectStore`: the thirteen S3 calls the core makes, on google-cloud-storage.

`GcsStore(client)` takes a `google.cloud.storage.Client` (the Airflow layer builds it from `GCSHook`'s connection)
and answers each call in S3's shapes, so that nothing else in the core changes:

- Listings use `startOffset` for S3's StartAfter (the equal key left out) and the adapter's own continuation
  token (the key to resume after), one JSON API page a call (more while GCS answers pages holding no entry but a
  nextPageToken: a listing ends only where GCS's does), keys in UTF-8 byte order as on S3. `LastModified` is
  the generation's `timeCreated` (like S3's, it never changes with metadata updates).
- `ETag` is the object's MD5 in lowercase hex, quoted, as S3's for a single PUT: a server-side copy (rewrite)
  keeps it. A composite object has no MD5: its native etag is reported, with `ETagIsMD5: False` on HEAD.
  HEAD also reports `ChecksumCRC32C` (GCS's CRC32C, base64 of big-endian bytes as S3's) with
  `ChecksumType: FULL_OBJECT`.
- `delete_objects` sends the JSON API's batch requests (https://cloud.google.com/storage/docs/batch), at most
  100 calls each, `BATCH_CONCURRENCY` batches at a time, and answers S3's `Deleted`/`Errors` per key: not found
  -> NoSuchKey (NoSuchVersion for a generation; a 404 naming the bucket is NoSuchBucket, never "already gone"),
  429/503 -> SlowDown, other 5xx -> InternalError, 403 (a held
  object among them) -> AccessDenied, 412 -> PreconditionFailed. A batch that fails as a whole raises (after the
  SDK's default retry policy), as boto3's DeleteObjects does.
- `copy_object` is a rewrite, looped on its token, with no 5 GiB limit (`single_copy_limit` is 5 TiB). The ETag
  of CopySourceIfMatch is checked against the source's MD5, and the rewrite then names the generation just read
  (`ifSourceGenerationMatch`), so a source written again in between is refused: PreconditionFailed, 412.
- Versioning: `get_bucket_versioning` answers `{"Status": "Enabled"}` when the bucket's object versioning is on,
  and `{}` otherwise (a delete on such a bucket is final, whatever it kept before: S3's "Suspended" bucket, which
  still leaves markers, has no GCS counterpart).

How S3's delete markers map onto object generations (https://cloud.google.com/storage/docs/object-versioning):
GCS has no markers. Deleting the live object of a versioned bucket makes it a noncurrent generation. So
`list_object_versions` lists every generation as a version (VersionId = the generation; the live one IsLatest),
and for a key with no live generation left, one synthesized delete marker above its newest noncurrent one:
VersionId `"deleted:<that generation>"`, LastModified its `timeDeleted`. A delete answers
`DeleteMarker: True, DeleteMarkerVersionId: "deleted:<the deleted generation>"`: the generation read just before
the batch, and the delete is held to it (`ifGenerationMatch`), so a key written in between fails PreconditionFailed
and stays (blobgc never deletes a generation it did not read); a key with no live generation then is answered
NoSuchKey without a delete. Deleting that marker's VersionId "removes the marker": the generation it names is
rewritten back as the live object (`ifGenerationMatch=0`, so a key written meanwhile is left as it is); deleting a
generation's VersionId deletes that generation for good. Bucket lifecycle rules that delete noncurrent generations
(`daysSinceNoncurrentTime`, or `age` with `isLive: false`) read as S3's NoncurrentVersionExpiration.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http.client
import json
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, NoReturn
from urllib.parse import quote

import requests
import urllib3
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError
from google.api_core import exceptions as google_errors
from google.auth import exceptions as auth_errors
from google.cloud.storage.batch import Batch
from google.cloud.storage.retry import DEFAULT_RETRY

from blobgc.core.stores import OneCallCopies

BATCH_CALLS = 100  # the JSON API's limit of calls in one batch request
BATCH_CONCURRENCY = 4
MAX_KEYS = 1000  # S3's DeleteObjects and listing limit, which the core keeps to
MARKER = "deleted:"
READ_CHUNK = 8 * 1024**2  # bytes a GetObject body reads a request
# failures of the transport, raised as EndpointConnectionError: a connection refused, reset or timed out (also while a
# body is read, where urllib3's and http.client's own errors surface), and a token refresh that could not reach the
# token endpoint (google.auth's TransportError)
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    auth_errors.TransportError,
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.TimeoutError,
    urllib3.exceptions.PoolError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
)


def client_error(code: str, message: str, status: int, operation: str) -> ClientError:
    """A ClientError as botocore raises one, so that the core's checks (is_transient, error_code) read it."""
    error = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(error, operation)


def code_of(status: int, *, not_found: str = "NoSuchKey") -> str:
    """S3's error code for a JSON API status."""
    if status == 404:
        return not_found
    if status in (429, 503):
        return "SlowDown"
    if status >= 500:
        return "InternalError"
    return {401: "AccessDenied", 403: "AccessDenied", 409: "OperationAborted", 412: "PreconditionFailed"}.get(
        status, "InvalidRequest"
    )


def missing_bucket(message: str) -> bool:
    return "bucket does not exist" in message.lower() or "no such bucket" in message.lower()


def key_code(status: int, message: str, *, not_found: str = "NoSuchKey") -> str:
    """S3's code for one key's failed call: a 404 naming the bucket is NoSuchBucket, never "already gone"."""
    if status == 404 and missing_bucket(message):
        return "NoSuchBucket"
    return code_of(status, not_found=not_found)


def etag_of(properties: dict[str, Any]) -> str:
    """S3's ETag for an object resource: its MD5 in hex, quoted; the native etag when it has no MD5."""
    md5 = properties.get("md5Hash")
    if md5:
        with contextlib.suppress(binascii.Error, ValueError):
            return f'"{base64.b64decode(md5).hex()}"'
    return f'"{properties.get("etag") or ""}"'


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def listed(properties: dict[str, Any]) -> dict[str, Any]:
    """One Contents entry of a listing."""
    return {
        "Key": properties["name"],
        "Size": int(properties.get("size") or 0),
        "LastModified": parse_time(properties.get("timeCreated")),
        "ETag": etag_of(properties),
        "StorageClass": properties.get("storageClass", "STANDARD"),
    }


def encode_token(start: str, skip: str | None) -> str:
    return base64.urlsafe_b64encode(json.dumps([start, skip]).encode()).decode()


def decode_token(token: str) -> tuple[str, str | None]:
    try:
        start, skip = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(start), (str(skip) if skip is not None else None)
    except (ValueError, TypeError) as error:
        raise client_error(
            "InvalidArgument", "The continuation token provided is incorrect", 400, "ListObjectsV2"
        ) from (error)


def after_prefix(prefix: str) -> str:
    """The smallest name after every name that starts with `prefix`."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class GcsBody:
    """A GetObject's Body: the object's bytes read as they are asked for, SDK errors raised as botocore's."""

    def __init__(self, store: GcsStore, reader: Any) -> None:
        self.store, self.reader = store, reader

    def read(self, size: int = -1) -> bytes:
        with self.store.translated("GetObject"):
            return bytes(self.reader.read(size))

    def close(self) -> None:
        self.reader.close()


class GcsPaginator:
    """S3's paginators of the two listings the core pages through."""

    def __init__(self, store: GcsStore, operation: str) -> None:
        if operation not in ("list_objects_v2", "list_object_versions"):
            raise NotImplementedError(f"GCS store: no paginator for {operation}")
        self.store, self.operation = store, operation

    def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        kwargs.pop("PaginationConfig", None)
        if self.operation == "list_object_versions":
            yield from self.store.version_pages(kwargs["Bucket"], kwargs.get("Prefix") or "")
            return
        token = kwargs.pop("ContinuationToken", None)
        while True:
            page = self.store.list_objects_v2(**kwargs, **({"ContinuationToken": token} if token else {}))
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return


class GcsStore(OneCallCopies):
    """blobgc's ObjectStore on Google Cloud Storage (see the module docstring)."""

    copy_call = "a rewrite"  # single_copy_limit: OneCallCopies's 5 TiB

    def __init__(self, client: Any, *, batch_concurrency: int = BATCH_CONCURRENCY, retry: Any = DEFAULT_RETRY) -> None:
        self.client = client
        self.batch_concurrency = batch_concurrency
        self.retry = retry  # the SDK's retry policy of a batch request as a whole (the SDK sends batches unretried)
        self.endpoint = str(client._connection.API_BASE_URL)

    # ---------------------------------------------------------------- errors
    @contextlib.contextmanager
    def translated(self, operation: str, *, not_found: str = "NoSuchKey") -> Iterator[None]:
        """Every SDK failure as botocore's: a ClientError, or EndpointConnectionError for the transport."""
        try:
            yield
        except google_errors.RetryError as error:
            cause = error.cause
            if isinstance(cause, google_errors.GoogleAPICallError):
                self.raise_api_error(cause, operation, not_found)
            raise EndpointConnectionError(endpoint_url=self.endpoint, error=error) from error
        except google_errors.GoogleAPICallError as error:
            self.raise_api_error(error, operation, not_found)
        except TRANSPORT_ERRORS as error:
            raise EndpointConnectionError(endpoint_url=self.endpoint, error=error) from error

    @staticmethod
    def raise_api_error(error: google_errors.GoogleAPICallError, operation: str, not_found: str) -> NoReturn:
        status = int(error.code or 500)
        message = str(error.message)
        raise client_error(key_code(status, message, not_found=not_found), message, status, operation) from error

    def fetch_blob(self, bucket: str, key: str, version: str | None, operation: str, not_found: str) -> Any:
        """The object (one generation with `version`) with its properties; a missing one raises `not_found`, a
        missing bucket NoSuchBucket (the SDK's get_blob answers None for both)."""
        blob = self.client.bucket(bucket).blob(key, generation=int(version) if version else None)
        with self.translated(operation, not_found=not_found):
            blob.reload()
        return blob

    # ---------------------------------------------------------------- listings
    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]:
        """One page of keys (and of CommonPrefixes with a Delimiter) after StartAfter or the continuation token."""
        bucket, prefix = kwargs["Bucket"], kwargs.get("Prefix") or ""
        delimiter = kwargs.get("Delimiter") or None
        want = min(int(kwargs.get("MaxKeys", MAX_KEYS)), MAX_KEYS)
        start, skip = "", None
        if kwargs.get("ContinuationToken"):
            start, skip = decode_token(kwargs["ContinuationToken"])
        elif kwargs.get("StartAfter"):
            start = skip = kwargs["StartAfter"]
        if start and prefix and start < prefix:
            start, skip = prefix, None
        answer: dict[str, Any] = {"Name": bucket, "Prefix": prefix, "MaxKeys": want, "KeyCount": 0}
        if delimiter:
            answer["Delimiter"] = delimiter
        if want <= 0:
            return {**answer, "IsTruncated": False}
        with self.translated("ListObjectsV2", not_found="NoSuchBucket"):
            iterator = self.client.list_blobs(
                bucket,
                prefix=prefix or None,
                delimiter=delimiter,
                start_offset=start or None,
                page_size=want + (1 if skip is not None else 0),
            )
            # GCS may answer a page shorter than asked, or one of the skipped key alone, or none, with a token: ask on
            # until a page holds an entry or the listing ends (an empty page is never taken for the end)
            entries: list[tuple[str, dict[str, Any] | None]] = []
            more = True
            pages = iter(iterator.pages)
            while not entries and more:
                page = next(pages, None)
                blobs = [blob._properties for blob in page] if page is not None else []
                prefixes = list(page.prefixes) if page is not None else []
                more = page is not None and bool(iterator.next_page_token)
                found: list[tuple[str, dict[str, Any] | None]] = [(p["name"], p) for p in blobs]
                found += [(p, None) for p in prefixes]
                entries = sorted((e for e in found if e[0] != skip), key=lambda e: e[0])
        if len(entries) > want:
            entries, more = entries[:want], True
        contents = [listed(p) for _, p in entries if p is not None]
        common = [{"Prefix": name} for name, p in entries if p is None]
        answer.update(IsTruncated=more, KeyCount=len(entries))
        if contents:
            answer["Contents"] = contents
        if common:
            answer["CommonPrefixes"] = common
        if answer["IsTruncated"]:
            last, properties = entries[-1]
            answer["NextContinuationToken"] = (
                encode_token(last, last) if properties is not None else encode_token(after_prefix(last), None)
            )
        return answer

    def get_paginator(self, operation_name: str) -> GcsPaginator:
        return GcsPaginator(self, operation_name)

    def version_pages(self, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
        """list_object_versions' pages: every generation a version, a synthesized marker over a key with no live one."""
        page: dict[str, list[dict[str, Any]]] = {"Versions": [], "DeleteMarkers": []}
        with self.translated("ListObjectVersions", not_found="NoSuchBucket"):
            group: list[dict[str, Any]] = []
            for blob in self.client.list_blobs(bucket, prefix=prefix or None, versions=True):
                properties = blob._properties
                if group and group[0]["name"] != properties["name"]:
                    self.add_versions(page, group)
                    group = []
                    if len(page["Versions"]) + len(page["DeleteMarkers"]) >= MAX_KEYS:
                        yield {"Name": bucket, "Prefix": prefix, "IsTruncated": True, **page}
                        page = {"Versions": [], "DeleteMarkers": []}
                group.append(properties)
            if group:
                self.add_versions(page, group)
        yield {"Name": bucket, "Prefix": prefix, "IsTruncated": False, **page}

    @staticmethod
    def add_versions(page: dict[str, list[dict[str, Any]]], generations: list[dict[str, Any]]) -> None:
        """One key's generations as S3's versions, newest first, under a marker when none is live."""
        ordered = sorted(generations, key=lambda p: int(p["generation"]), reverse=True)
        live = [p for p in ordered if not p.get("timeDeleted")]
        if not live:
            newest = ordered[0]
            page["DeleteMarkers"].append(
                {
                    "Key": newest["name"],
                    "VersionId": f"{MARKER}{newest['generation']}",
                    "IsLatest": True,
                    "LastModified": parse_time(newest.get("timeDeleted")),
                }
            )
        for properties in ordered:
            page["Versions"].append(
                {
                    **listed(properties),
                    "VersionId": str(properties["generation"]),
                    "IsLatest": not properties.get("timeDeleted"),
                }
            )

    # ---------------------------------------------------------------- objects
    def head_object(self, **kwargs: Any) -> dict[str, Any]:
        """Size, time, ETag, metadata and CRC32C of the object; a missing one raises ClientError "404" as HEAD does."""
        bucket, key, version = kwargs["Bucket"], kwargs["Key"], kwargs.get("VersionId")
        if version and version.startswith(MARKER):
            raise client_error("405", "Method Not Allowed", 405, "HeadObject")
        blob = self.fetch_blob(bucket, key, version, "HeadObject", "404")
        return self.described(blob._properties)

    @staticmethod
    def described(properties: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "ContentLength": int(properties.get("size") or 0),
            "LastModified": parse_time(properties.get("timeCreated")),
            "ETag": etag_of(properties),
            "Metadata": dict(properties.get("metadata") or {}),
            "ContentType": properties.get("contentType") or "application/octet-stream",
            "VersionId": str(properties.get("generation")),
            "StorageClass": properties.get("storageClass", "STANDARD"),
        }
        if not properties.get("md5Hash"):
            answer["ETagIsMD5"] = False
        if properties.get("crc32c"):
            answer.update(ChecksumCRC32C=properties["crc32c"], ChecksumType="FULL_OBJECT")
        return answer

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        """The object's bytes (the generation read, not one written meanwhile) with its HEAD's fields."""
        bucket, key, version = kwargs["Bucket"], kwargs["Key"], kwargs.get("VersionId")
        blob = self.fetch_blob(bucket, key, version, "GetObject", "NoSuchKey")
        # read in chunks, each pinned to the generation HEAD described (a later one fails the read: 412)
        reader = blob.open("rb", chunk_size=READ_CHUNK, if_generation_match=blob.generation)
        return {**self.described(blob._properties), "Body": GcsBody(self, reader)}

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        bucket, key, body = kwargs["Bucket"], kwargs["Key"], kwargs.get("Body", b"")
        blob = self.client.bucket(bucket).blob(key)
        if kwargs.get("Metadata"):
            blob.metadata = dict(kwargs["Metadata"])
        content_type = kwargs.get("ContentType") or "application/octet-stream"
        with self.translated("PutObject", not_found="NoSuchBucket"):
            if hasattr(body, "read"):
                blob.upload_from_file(body, content_type=content_type)
            else:
                blob.upload_from_string(body, content_type=content_type)
        return {"ETag": etag_of(blob._properties), "VersionId": str(blob.generation)}

    def copy_object(self, **kwargs: Any) -> dict[str, Any]:
        """A server-side copy (rewrite, looped on its token); CopySourceIfMatch is held to the generation it matched."""
        source = kwargs["CopySource"]
        source_bucket, source_key, version = source["Bucket"], source["Key"], source.get("VersionId")
        if version and version.startswith(MARKER):
            raise client_error("InvalidRequest", "The source of a copy may not be a delete marker", 400, "CopyObject")
        wanted = kwargs.get("CopySourceIfMatch")
        match_generation: int | None = None
        if wanted:
            found = self.fetch_blob(source_bucket, source_key, version, "CopyObject", "NoSuchKey")
            if etag_of(found._properties).strip('"') != str(wanted).strip('"'):
                raise client_error(
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold",
                    412,
                    "CopyObject",
                )
            match_generation = int(found.generation)
        source_blob = self.client.bucket(source_bucket).blob(source_key, generation=int(version) if version else None)
        target = self.client.bucket(kwargs["Bucket"]).blob(kwargs["Key"])
        if kwargs.get("MetadataDirective") == "REPLACE":
            target.metadata = dict(kwargs.get("Metadata") or {})
            target.content_type = kwargs.get("ContentType") or "application/octet-stream"
        token: str | None = None
        with self.translated("CopyObject"):
            while True:
                token, _, _ = target.rewrite(
                    source_blob,
                    token=token,
                    if_source_generation_match=None if version else match_generation,
                    retry=DEFAULT_RETRY,
                )
                if token is None:
                    break
        return {
            "CopyObjectResult": {
                "ETag": etag_of(target._properties),
                "LastModified": parse_time(target._properties.get("timeCreated")),
            },
            "VersionId": str(target.generation),
        }

    # ---------------------------------------------------------------- deletes
    def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
        """Up to 1000 deletes in JSON API batches of 100, answered per key in S3's shape (see the module docstring)."""
        bucket, request = kwargs["Bucket"], kwargs["Delete"]
        objects: list[dict[str, str]] = list(request.get("Objects") or [])
        quiet = bool(request.get("Quiet"))
        if not objects or len(objects) > MAX_KEYS:
            raise client_error("MalformedXML", f"DeleteObjects takes 1 to {MAX_KEYS} keys", 400, "DeleteObjects")
        markers = [o for o in objects if str(o.get("VersionId") or "").startswith(MARKER)]
        plain = [o for o in objects if not str(o.get("VersionId") or "").startswith(MARKER)]
        generations: dict[str, str] = {}
        deleted: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        if not quiet and any(not o.get("VersionId") for o in plain) and self.versioning_enabled(bucket):
            # the marker a delete reports names the generation read here, and the delete is held to it
            # (ifGenerationMatch): a key written again in between fails PreconditionFailed and stays as it is; a key
            # whose generation could not be read (absent, or the read failed) is not deleted, only answered
            generations, unread = self.live_generations(bucket, [o["Key"] for o in plain if not o.get("VersionId")])
            errors += unread
            skipped = {e["Key"] for e in unread}
            plain = [o for o in plain if o.get("VersionId") or o["Key"] not in skipped]

        def params(entry: dict[str, str]) -> dict[str, str]:
            if entry.get("VersionId"):
                return {"generation": entry["VersionId"]}
            if entry["Key"] in generations:
                return {"ifGenerationMatch": generations[entry["Key"]]}
            return {}

        calls = [("DELETE", o["Key"], params(o), None) for o in plain]
        answers = self.send_batches(bucket, calls, "DeleteObjects")
        for entry, (status, message) in zip(plain, answers, strict=True):
            key, version = entry["Key"], entry.get("VersionId")
            if 200 <= status < 300:
                done: dict[str, Any] = {"Key": key}
                if version:
                    done["VersionId"] = version
                elif key in generations:
                    done.update(DeleteMarker=True, DeleteMarkerVersionId=f"{MARKER}{generations[key]}")
                deleted.append(done)
            else:
                code = key_code(status, message, not_found="NoSuchVersion" if version else "NoSuchKey")
                errors.append(
                    {"Key": key, "Code": code, "Message": message, **({"VersionId": version} if version else {})}
                )
        # a request that also deletes generations of a marker's key (the quarantine purge deletes every version and
        # marker of a key) removes the marker with them, as on S3: nothing is brought back
        purged = {o["Key"] for o in plain if o.get("VersionId")}
        restores = [o for o in markers if o["Key"] not in purged]
        deleted += [
            {
                "Key": o["Key"],
                "VersionId": o["VersionId"],
                "DeleteMarker": True,
                "DeleteMarkerVersionId": o["VersionId"],
            }
            for o in markers
            if o["Key"] in purged
        ]
        markers = restores
        if markers:
            with ThreadPoolExecutor(max(1, min(self.batch_concurrency, len(markers)))) as pool:
                for entry, error in zip(
                    markers, pool.map(lambda o: self.restore_marker(bucket, o), markers), strict=True
                ):
                    if error is None:
                        vid = entry["VersionId"]
                        deleted.append(
                            {"Key": entry["Key"], "VersionId": vid, "DeleteMarker": True, "DeleteMarkerVersionId": vid}
                        )
                    else:
                        errors.append(error)
        answer: dict[str, Any] = {"ResponseMetadata": {"HTTPStatusCode": 200}}
        if deleted and not quiet:
            answer["Deleted"] = deleted
        if errors:
            answer["Errors"] = errors
        return answer

    def restore_marker(self, bucket: str, entry: dict[str, str]) -> dict[str, str] | None:
        """remove_marker, a transport failure answered as this key's InternalError (the core sends it again) so that
        the keys the request deleted are still reported."""
        try:
            return self.remove_marker(bucket, entry)
        except BotoCoreError as error:
            return {
                "Key": entry["Key"],
                "VersionId": entry["VersionId"],
                "Code": "InternalError",
                "Message": str(error),
            }

    def remove_marker(self, bucket: str, entry: dict[str, str]) -> dict[str, str] | None:
        """Bring back the generation a synthesized marker names as the live object; None when done (or when the key
        is live again: no marker is left), else S3's error entry."""
        key, vid = entry["Key"], entry["VersionId"]
        if not vid[len(MARKER) :].isdigit():
            return {"Key": key, "VersionId": vid, "Code": "NoSuchVersion", "Message": "Invalid version id specified"}
        generation = int(vid[len(MARKER) :])
        source = self.client.bucket(bucket).blob(key, generation=generation)
        target = self.client.bucket(bucket).blob(key)
        token: str | None = None
        try:
            with self.translated("DeleteObjects", not_found="NoSuchVersion"):
                while True:
                    token, _, _ = target.rewrite(source, token=token, if_generation_match=0, retry=DEFAULT_RETRY)
                    if token is None:
                        return None
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code in ("PreconditionFailed", "NoSuchVersion"):
                return None  # the key is live again, or its generation is gone: either way no marker is left
            return {"Key": key, "VersionId": vid, "Code": code, "Message": error.response["Error"]["Message"]}

    def versioning_enabled(self, bucket: str) -> bool:
        return self.get_bucket_versioning(Bucket=bucket).get("Status") == "Enabled"

    def live_generations(self, bucket: str, keys: list[str]) -> tuple[dict[str, str], list[dict[str, str]]]:
        """The live generation of each key, read in batches of GETs (for the markers a delete reports), and S3's
        error entry of each key not read: absent (NoSuchKey), its bucket missing (NoSuchBucket), or the read failed."""
        calls = [("GET", key, {"fields": "name,generation"}, None) for key in keys]
        found: dict[str, str] = {}
        unread: list[dict[str, str]] = []
        for key, (status, body) in zip(
            keys, self.send_batches(bucket, calls, "DeleteObjects", bodies=True), strict=True
        ):
            if 200 <= status < 300:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    found[key] = str(json.loads(body)["generation"])
                    continue
                unread.append({"Key": key, "Code": "InternalError", "Message": "no generation in the object read"})
            else:
                message = self.message_of(body) or str(status)
                unread.append({"Key": key, "Code": key_code(status, message), "Message": message})
        return found, unread

    def send_batches(
        self,
        bucket: str,
        calls: list[tuple[str, str, dict[str, str], Any]],
        operation: str,
        *,
        bodies: bool = False,
    ) -> list[tuple[int, str]]:
        """Send object calls as JSON API batch requests of up to 100 calls, several at a time: (status, the error's
        message, or the body with `bodies`) per call, in order. A batch that fails as a whole raises."""
        chunks = [calls[i : i + BATCH_CALLS] for i in range(0, len(calls), BATCH_CALLS)]

        def send(chunk: list[tuple[str, str, dict[str, str], Any]]) -> list[tuple[int, str]]:
            batch = Batch(self.client, raise_exception=False)
            for method, key, params, data in chunk:
                batch.api_request(
                    method=method,
                    path=f"/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}",
                    query_params=params or None,
                    data=data,
                )
            with self.translated(operation, not_found="NoSuchBucket"):
                responses = self.retry(batch.finish)(raise_exception=False)
            return [(int(r.status_code), self.text_of(r, bodies)) for r in responses]

        if len(chunks) <= 1:
            return send(chunks[0]) if chunks else []
        with ThreadPoolExecutor(min(self.batch_concurrency, len(chunks))) as pool:
            return [answer for part in pool.map(send, chunks) for answer in part]

    @staticmethod
    def text_of(response: requests.Response, body: bool) -> str:
        text = response.content.decode("utf-8", "replace") if isinstance(response.content, bytes) else ""
        if body or 200 <= response.status_code < 300:
            return text
        return GcsStore.message_of(text) or str(response.status_code)

    @staticmethod
    def message_of(text: str) -> str:
        """The message of a JSON API error body (the body itself when it is not one)."""
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            return str(json.loads(text)["error"]["message"])
        return text

    # ---------------------------------------------------------------- buckets
    def get_bucket_versioning(self, **kwargs: Any) -> dict[str, Any]:
        """{"Status": "Enabled"} when object versioning is on, else {} (see the module docstring)."""
        with self.translated("GetBucketVersioning", not_found="NoSuchBucket"):
            found = self.client.get_bucket(kwargs["Bucket"])
        enabled = bool((found._properties.get("versioning") or {}).get("enabled"))
        return {"Status": "Enabled"} if enabled else {}

    def get_bucket_lifecycle_configuration(self, **kwargs: Any) -> dict[str, Any]:
        """The bucket's lifecycle rules that delete noncurrent generations, as S3's NoncurrentVersionExpiration."""
        with self.translated("GetBucketLifecycleConfiguration", not_found="NoSuchBucket"):
            found = self.client.get_bucket(kwargs["Bucket"])
        rules = s3_rules((found._properties.get("lifecycle") or {}).get("rule") or [])
        if not rules:
            raise client_error(
                "NoSuchLifecycleConfiguration",
                "The lifecycle configuration does not exist",
                404,
                "GetBucketLifecycleConfiguration",
            )
        return {"Rules": rules}


# conditions that narrow a rule to objects blobgc cannot tell it covers: such a rule is never taken to free them
NARROWING = frozenset(
    {
        "matchesSuffix",
        "matchesStorageClass",
        "numNewerVersions",
        "createdBefore",
        "customTimeBefore",
        "daysSinceCustomTime",
        "noncurrentTimeBefore",
    }
)


def s3_rules(rules: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """GCS lifecycle rules that delete noncurrent generations after N days, as S3 rules (one per prefix)."""
    found: list[dict[str, Any]] = []
    for rule in rules:
        if (rule.get("action") or {}).get("type") != "Delete":
            continue
        condition = rule.get("condition") or {}
        if NARROWING & set(condition):
            continue
        if "daysSinceNoncurrentTime" in condition:
            days = int(condition["daysSinceNoncurrentTime"])
        elif "age" in condition and condition.get("isLive") is False:
            days = int(condition["age"])  # the age since creation: never later than as long after noncurrent
        else:
            continue
        for prefix in condition.get("matchesPrefix") or [""]:
            found.append(
                {
                    "ID": f"gcs-noncurrent-{days}d" + (f"-{prefix}" if prefix else ""),
                    "Status": "Enabled",
                    "Filter": {"Prefix": prefix},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": days},
                    # a synthesized marker goes with the key's last generation: as ExpiredObjectDeleteMarker
                    "Expiration": {"ExpiredObjectDeleteMarker": True},
                }
            )
    return found
