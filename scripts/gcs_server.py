"""The local Google Cloud Storage server of the stack: gcp-storage-emulator (PyPI), run in process, plus what it lacks.

`python scripts/gcs_server.py --host 127.0.0.1 --port 59100 --data DIR` serves the JSON API of
gcp-storage-emulator (objects, buckets, uploads, downloads, soft delete with restore) with its state under DIR.
The emulator lacks these parts of the real service, which blobgc's GCS store uses; this script is the project's
stand-in for each, written to the real service's documented behaviour (links below), and nothing else:

- Object versioning (https://cloud.google.com/storage/docs/object-versioning): on a bucket with
  `versioning.enabled`, deleting or overwriting the live object keeps it as a noncurrent generation (with its
  `timeDeleted`); `versions=true` lists noncurrent generations beside live ones; `generation=` on GET (metadata
  and media) reads one generation, on DELETE removes it for good; `sourceGeneration=` on rewrite copies one.
- Listing ranges and pages (https://cloud.google.com/storage/docs/json_api/v1/objects/list): `startOffset`
  (inclusive), `endOffset` (exclusive), `maxResults` (at most 1000 items plus prefixes a page) and
  `pageToken`/`nextPageToken`; the emulator answered every object in one page.
- Generation preconditions (https://cloud.google.com/storage/docs/request-preconditions):
  `ifGenerationMatch` (0: no live object), `ifGenerationNotMatch`, `ifMetagenerationMatch`,
  `ifMetagenerationNotMatch` on get, delete, patch, media/multipart upload and rewrite's destination, and their
  `ifSource...` forms on rewrite: 412 conditionNotMet when one fails.
- Object holds (https://cloud.google.com/storage/docs/object-holds): `temporaryHold` and `eventBasedHold` are
  writable by PATCH, and an object under either may not be deleted, made noncurrent, or replaced by a
  media/multipart upload or a rewrite (403). (Resumable uploads are not checked for holds or preconditions.)
- Batch requests (https://cloud.google.com/storage/docs/batch): the emulator's batch handled DELETE, PATCH and
  copy only, dropping each call's query string (generation, preconditions); here every part is a full request
  routed like any other (its method, path, query and body), answered in order with its `Content-ID`, at most
  100 calls a batch (400 beyond).
- Bucket resources at creation (https://cloud.google.com/storage/docs/json_api/v1/buckets/insert): the
  emulator kept only the name; here `versioning`, `lifecycle` and the other writable fields given are kept.
  Lifecycle rules are stored and read back, never run (as on the local S3 server).
- Object names as the real service takes them (https://cloud.google.com/storage/docs/objects#naming): the emulator
  kept each object's bytes at the path of its name, so `k/a` and `k/a/b` could not both exist (nor `a//b` beside
  `a/b`); here each name's bytes are one flat file named by the name's SHA-256 (files of the old layout are moved
  there when the server starts).
- `POST /_blobgc/backdate?bucket=B&key=K&seconds=N` (docs/reference.md §1, as scripts/s3_server.py's): moves the
  live object's `timeCreated` and `updated` N seconds into the past, so listings and metadata report it older;
  404 when there is no such live object. Local stack only, as on the S3 server.
- `POST /_blobgc/pages?bucket=B&limit=N&empty=1` (a test hook, local stack only): objects.list of bucket B then
  answers at most N items and prefixes a page (`limit=0` lifts it), and with `empty=1` an empty page with a
  nextPageToken before each page that holds any: the short and empty pages the real service may answer (a page
  may hold fewer results than maxResults; only the absence of nextPageToken ends a listing:
  https://cloud.google.com/storage/docs/json_api/v1/objects/list,
  https://cloud.google.com/storage/docs/paginate-results), so that clients are tested against them. Kept in
  memory: a restart lifts every limit.

Requests are served on threads, one at a time under a lock (the emulator's storage is not thread-safe), so that
a slow client never holds up the accept queue; the state file is written in the background (at most every
FLUSH_EVERY seconds, and on SIGTERM) instead of after every call. `ensure_buckets` creates the stack's buckets
(versioned, with a 7-day noncurrent-version lifecycle rule) through the JSON API, with the standard library only.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import email.parser
import hashlib
import json
import logging
import os
import re
import secrets
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http import HTTPStatus
from http import server as http_server
from typing import Any

from gcp_storage_emulator import server as emulator
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.gcs_glob import gcs_glob_match
from gcp_storage_emulator.handlers import buckets as emulator_buckets
from gcp_storage_emulator.handlers import objects as emulator_objects
from gcp_storage_emulator.settings import STORAGE_DIR
from gcp_storage_emulator.storage import Storage

log = logging.getLogger("blobgc.gcs_server")

NONCURRENT_DIR = "_noncurrent"  # real bucket names cannot start with an underscore
MAX_PAGE = 1000
MAX_BATCH_CALLS = 100
FLUSH_EVERY = 0.5  # seconds between writes of the state file, while it changes
BACKDATE_PATH = "/_blobgc/backdate"
PAGES_PATH = "/_blobgc/pages"
OBJECT_FILE = "o-"  # an object's bytes: f"{bucket}/o-{sha256 of its name}"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
HOLD_FIELDS = ("temporaryHold", "eventBasedHold")


Handler = Callable[[Any, Any, "BlobgcStorage"], None]
EMULATOR_INSERT = emulator_objects.insert


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime(TIME_FORMAT)


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


class BlobgcStorage(Storage):  # type: ignore[misc]
    """The emulator's storage with noncurrent generations, and its state file written in the background."""

    def __init__(self, data_dir: str) -> None:
        self.lock = threading.RLock()
        self.noncurrent: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        self.page_limits: dict[str, tuple[int, bool]] = {}  # bucket -> (items a page at most, empty pages between)
        self._dirty = False
        super().__init__(use_memory_fs=False, data_dir=data_dir)

    # -- state on disk: the emulator rewrites its whole state file on every change, which costs a bucket of 10,000
    # objects seconds a call; here a change marks it dirty and `flush` writes it, FLUSH_EVERY seconds after a change
    # and when the server stops
    def _write_config_to_file(self) -> None:
        self._dirty = True

    def flush(self) -> None:
        """Write the state file if anything changed since it was last written."""
        with self.lock:
            if not self._dirty:
                return
            self._dirty = False
            data = {
                "buckets": self.buckets,
                "objects": self.objects,
                "resumable": self.resumable,
                "bucket_iam_policies": self.bucket_iam_policies,
                "soft_deleted": self.soft_deleted,
                "noncurrent": self.noncurrent,
            }
            self._store.write_bytes(".meta.tmp", json.dumps(data).encode("utf-8"))
            os.replace(
                os.path.join(self._data_dir, STORAGE_DIR, ".meta.tmp"),
                os.path.join(self._data_dir, STORAGE_DIR, ".meta"),
            )

    def flush_every(self, seconds: float) -> None:
        """Flush the state in the background, `seconds` apart, for as long as the process runs."""

        def loop() -> None:
            while True:
                time.sleep(seconds)
                self.flush()

        threading.Thread(target=loop, name="flush-state", daemon=True).start()

    def _read_config_from_file(self) -> None:
        super()._read_config_from_file()
        try:
            self.noncurrent = json.loads(self._store.read_bytes(".meta")).get("noncurrent") or {}
        except FileNotFoundError:
            self.noncurrent = {}
        self.move_to_flat_files()

    # -- an object's bytes in one flat file per name, so that any two names coexist (the emulator's path of the name
    # made `k/a` a file where `k/a/b` needed a directory)
    def _object_path(self, bucket_name: str, file_name: str) -> str:
        return f"{bucket_name}/{OBJECT_FILE}{hashlib.sha256(file_name.encode('utf-8')).hexdigest()}"

    def move_to_flat_files(self) -> None:
        """Move the bytes of live objects stored at the emulator's path of their name to their flat file."""
        for bucket, objects in self.objects.items():
            for name in objects:
                flat = self._object_path(bucket, name)
                if self._store.exists_file(flat):
                    continue
                old = f"{bucket}/{name.replace(chr(92), '/').lstrip('/')}"
                with contextlib.suppress(FileNotFoundError, ValueError, OSError):
                    self._store.write_bytes(flat, self._store.read_bytes(old))
                    self._store.remove_file(old)

    def wipe(self, keep_buckets: bool = False) -> None:
        self.noncurrent = {}
        super().wipe(keep_buckets)

    # -- versioning
    def versioned(self, bucket: str) -> bool:
        return bool(((self.buckets.get(bucket) or {}).get("versioning") or {}).get("enabled"))

    def _noncurrent_path(self, bucket: str, name: str, generation: str) -> str:
        digest = hashlib.sha256(f"{bucket}:{name}:{generation}".encode()).hexdigest()
        return f"{NONCURRENT_DIR}/{bucket}/{digest}"

    def live(self, bucket: str, name: str) -> dict[str, Any] | None:
        return (self.objects.get(bucket) or {}).get(name)

    def make_noncurrent(self, bucket: str, name: str) -> None:
        """Keep the live object as a noncurrent generation (its bytes moved aside) and remove it from the live."""
        obj = self.objects[bucket].pop(name)
        try:
            content = self.get_file(bucket, name, show_error=False)
        except NotFound:
            content = b""
        generation = str(obj["generation"])
        self._store.write_bytes(self._noncurrent_path(bucket, name, generation), content)
        obj["timeDeleted"] = now_text()
        self.noncurrent.setdefault(bucket, {}).setdefault(name, {})[generation] = obj
        self._delete_file(bucket, name)

    def create_file(self, bucket_name: str, file_name: str, content: bytes, file_obj: Any, file_id: Any = None) -> None:
        current = self.live(bucket_name, file_name)
        if current is not None and self.versioned(bucket_name) and current["generation"] != file_obj["generation"]:
            self.make_noncurrent(bucket_name, file_name)
        super().create_file(bucket_name, file_name, content, file_obj, file_id)

    def delete_file(self, bucket_name: str, file_name: str) -> None:
        if self.versioned(bucket_name) and self.live(bucket_name, file_name) is not None:
            self.make_noncurrent(bucket_name, file_name)
            self._write_config_to_file()
            return
        super().delete_file(bucket_name, file_name)

    def generation(self, bucket: str, name: str, generation: str) -> dict[str, Any]:
        """The object resource of one generation, live or noncurrent; NotFound when there is none."""
        current = self.live(bucket, name)
        if current is not None and str(current["generation"]) == generation:
            return current
        try:
            return self.noncurrent[bucket][name][generation]
        except KeyError as error:
            raise NotFound from error

    def generation_bytes(self, bucket: str, name: str, generation: str) -> bytes:
        current = self.live(bucket, name)
        if current is not None and str(current["generation"]) == generation:
            return bytes(self.get_file(bucket, name, show_error=False))
        self.generation(bucket, name, generation)
        try:
            return bytes(self._store.read_bytes(self._noncurrent_path(bucket, name, generation)))
        except FileNotFoundError:
            return b""

    def delete_generation(self, bucket: str, name: str, generation: str) -> None:
        """Delete one generation for good (a live one as the emulator deletes: soft-deleted if the bucket says so)."""
        current = self.live(bucket, name)
        if current is not None and str(current["generation"]) == generation:
            Storage.delete_file(self, bucket, name)
            return
        self.generation(bucket, name, generation)
        with contextlib.suppress(FileNotFoundError):
            self._store.remove_file(self._noncurrent_path(bucket, name, generation))
        del self.noncurrent[bucket][name][generation]
        if not self.noncurrent[bucket][name]:
            del self.noncurrent[bucket][name]
        self._write_config_to_file()

    def delete_bucket(self, bucket_name: str) -> None:
        if any(self.noncurrent.get(bucket_name, {}).values()):
            from gcp_storage_emulator.exceptions import Conflict

            raise Conflict(f"Bucket '{bucket_name}' is not empty")
        self.noncurrent.pop(bucket_name, None)
        super().delete_bucket(bucket_name)


# ---------------------------------------------------------------- answers
def fail(response: Any, status: HTTPStatus, reason: str, message: str) -> None:
    """An error answer as the JSON API gives one."""
    response.status = status
    response.json(
        {
            "error": {
                "code": status.value,
                "message": message,
                "errors": [{"domain": "global", "reason": reason, "message": message}],
            }
        }
    )


def not_found(response: Any, bucket: str, name: str | None = None) -> None:
    what = f"No such object: {bucket}/{name}" if name else f"The specified bucket does not exist: {bucket}"
    fail(response, HTTPStatus.NOT_FOUND, "notFound", what)


def query_value(request: Any, name: str) -> str | None:
    values = request.query.get(name)
    return values[0] if values else None


def truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


def precondition_failed(request: Any, obj: dict[str, Any] | None, *, source: bool = False) -> bool:
    """Whether a generation or metageneration precondition of the request fails against `obj` (None: absent)."""
    infix = "Source" if source else ""
    checks = (
        ("Generation", "generation", True),
        ("Generation", "generation", False),
        ("Metageneration", "metageneration", True),
        ("Metageneration", "metageneration", False),
    )
    for what, field, match in checks:
        value = query_value(request, f"if{infix}{what}{'Match' if match else 'NotMatch'}")
        if value is None:
            continue
        current = None if obj is None else str(obj.get(field))
        if match:
            if value == "0" and what == "Generation":
                if obj is not None:
                    return True
            elif current != value:
                return True
        elif (value == "0" and what == "Generation" and obj is None) or (current is not None and current == value):
            return True
    return False


def refuse_precondition(response: Any) -> None:
    fail(
        response,
        HTTPStatus.PRECONDITION_FAILED,
        "conditionNotMet",
        "At least one of the pre-conditions you specified did not hold.",
    )


def held(obj: dict[str, Any]) -> str | None:
    """The hold an object is under ("Temporary" or "Event-based"), if any."""
    if obj.get("temporaryHold"):
        return "Temporary"
    if obj.get("eventBasedHold"):
        return "Event-based"
    return None


def target(storage: BlobgcStorage, request: Any, response: Any) -> dict[str, Any] | None:
    """The object a request names (a `generation`, or the live one); answers 404 and returns None when absent."""
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    if bucket not in storage.buckets:
        not_found(response, bucket)
        return None
    generation = query_value(request, "generation")
    try:
        if generation:
            return storage.generation(bucket, name, generation)
        return dict(storage.get_file_obj(bucket, name))
    except NotFound:
        not_found(response, bucket, name)
        return None


# ---------------------------------------------------------------- handlers
def get_object(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """objects.get, with `generation` and preconditions (the emulator's own for soft-deleted objects)."""
    if truthy(query_value(request, "softDeleted")):
        emulator_objects.get(request, response, storage)
        return
    if query_value(request, "alt") == "media":
        download(request, response, storage)
        return
    obj = target(storage, request, response)
    if obj is None:
        return
    if precondition_failed(request, obj):
        refuse_precondition(response)
        return
    response.json(obj)


def download(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """The object's bytes (one generation's with `generation`), with Range, hashes and custom metadata headers."""
    obj = target(storage, request, response)
    if obj is None:
        return
    if precondition_failed(request, obj):
        refuse_precondition(response)
        return
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    content = storage.generation_bytes(bucket, name, str(obj["generation"]))
    wanted = request.get_header("range", None)
    match = re.fullmatch(r"\s*bytes=(?P<start>[0-9]+)-(?P<end>[0-9]*)", wanted or "")
    if match:
        start, total = int(match["start"]), len(content)
        end = min(total, int(match["end"]) + 1) if match["end"] else total
        response["Content-Range"] = f"bytes {start}-{end - 1}/{total}"
        response.status = HTTPStatus.PARTIAL_CONTENT
        content = content[start:end]
    else:
        response[emulator_objects._HASH_HEADER] = f"crc32c={obj.get('crc32c')},md5={obj.get('md5Hash')}"
    response["X-Goog-Generation"] = str(obj["generation"])
    for key, value in (obj.get("metadata") or {}).items():
        if value is not None:
            response[f"x-goog-meta-{key}"] = str(value)
    response.write_file(content, content_type=obj.get("contentType"))


def delete_object(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """objects.delete: the live object (noncurrent on a versioned bucket) or one `generation` for good; refused
    under a hold or a failed precondition."""
    obj = target(storage, request, response)
    if obj is None:
        return
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    hold = held(obj)
    if hold:
        fail(
            response,
            HTTPStatus.FORBIDDEN,
            "forbidden",
            f"Object '{bucket}/{name}' is under active {hold} hold "
            "and cannot be deleted, overwritten or archived until hold is removed.",
        )
        return
    if precondition_failed(request, obj):
        refuse_precondition(response)
        return
    generation = query_value(request, "generation")
    if generation:
        storage.delete_generation(bucket, name, generation)
    else:
        storage.delete_file(bucket, name)
    response.status = HTTPStatus.NO_CONTENT


def patch_object(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """objects.patch with preconditions (the live generation only, as the emulator keeps it)."""
    obj = target(storage, request, response)
    if obj is None:
        return
    if precondition_failed(request, obj):
        refuse_precondition(response)
        return
    emulator_objects.patch(request, response, storage)


def insert_object(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """Uploads, with `ifGenerationMatch` and friends checked against the live object (media and multipart)."""
    upload = query_value(request, "uploadType")
    if upload in ("media", "multipart"):
        name = query_value(request, "name")
        if name is None and upload == "multipart" and isinstance(request.data, dict):
            name = (request.data.get("meta") or {}).get("name")
        current = storage.live(request.params["bucket_name"], name or "")
        if precondition_failed(request, current):
            refuse_precondition(response)
            return
        if current is not None and held(current):
            fail(
                response,
                HTTPStatus.FORBIDDEN,
                "forbidden",
                f"Object '{name}' is under active hold and cannot be overwritten.",
            )
            return
    EMULATOR_INSERT(request, response, storage)


def insert_bucket(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """buckets.insert, keeping the resource's writable fields given with the name (versioning, lifecycle, ...)."""
    emulator_buckets.insert(request, response, storage)
    name = (request.data or {}).get("name")
    if response.status == HTTPStatus.OK and name:
        bucket = emulator_buckets._patch_bucket(storage.buckets[name], request.data)
        bucket["metageneration"] = "1"
        storage.create_bucket(name, bucket)
        response.json(bucket)


def rewrite_object(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """objects.rewrite in one call: `sourceGeneration`, source and destination preconditions, metadata given in
    the body replacing the source's; the copy keeps the source's MD5 and CRC32C."""
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    dest_bucket, dest_name = request.params["dest_bucket_name"], request.params["dest_object_id"]
    if bucket not in storage.buckets:
        not_found(response, bucket)
        return
    if dest_bucket not in storage.buckets:
        not_found(response, dest_bucket)
        return
    generation = query_value(request, "sourceGeneration")
    try:
        source = storage.generation(bucket, name, generation) if generation else storage.get_file_obj(bucket, name)
    except NotFound:
        not_found(response, bucket, name)
        return
    if precondition_failed(request, source, source=True) or precondition_failed(
        request, storage.live(dest_bucket, dest_name)
    ):
        refuse_precondition(response)
        return
    current = storage.live(dest_bucket, dest_name)
    if current is not None and held(current):
        fail(
            response,
            HTTPStatus.FORBIDDEN,
            "forbidden",
            f"Object '{dest_bucket}/{dest_name}' is under active hold and cannot be overwritten.",
        )
        return
    content = storage.generation_bytes(bucket, name, str(source["generation"]))
    given = request.data if isinstance(request.data, dict) else {}
    metadata = {k: v for k, v in source.items() if k in emulator_objects._WRITABLE_FIELDS and k not in HOLD_FIELDS}
    metadata.update({k: v for k, v in given.items() if k in emulator_objects._WRITABLE_FIELDS})
    metadata["md5Hash"], metadata["crc32c"] = source.get("md5Hash"), source.get("crc32c")
    copied = emulator_objects._make_object_resource(
        request.base_url, dest_bucket, dest_name, metadata.get("contentType"), str(len(content)), metadata
    )
    copied["metageneration"] = "1"
    copied = emulator_objects._checksums(content, copied)
    storage.create_file(dest_bucket, dest_name, content, copied)
    size = str(len(content))
    response.json(
        {
            "kind": "storage#rewriteResponse",
            "totalBytesRewritten": size,
            "objectSize": size,
            "done": True,
            "resource": copied,
        }
    )


def list_objects(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """objects.list with `versions`, `startOffset`/`endOffset`, `maxResults` and `pageToken` (soft-deleted
    listings are the emulator's own)."""
    if truthy(query_value(request, "softDeleted")):
        emulator_objects.ls(request, response, storage)
        return
    bucket = request.params["bucket_name"]
    if bucket not in storage.buckets:
        not_found(response, bucket)
        return
    prefix = query_value(request, "prefix") or ""
    delimiter = query_value(request, "delimiter") or ""
    glob = query_value(request, "matchGlob")
    start, end = query_value(request, "startOffset") or "", query_value(request, "endOffset")
    page = min(int(query_value(request, "maxResults") or MAX_PAGE), MAX_PAGE)
    limit, empty_pages = storage.page_limits.get(bucket, (0, False))
    if limit > 0:
        page = min(page, limit)
    if page <= 0:
        fail(response, HTTPStatus.BAD_REQUEST, "invalid", "Invalid value for maxResults")
        return
    token = query_value(request, "pageToken")
    resume: tuple[str, int] | None = None
    after_empty = False  # the page asked for follows an empty one (the `pages` hook's)
    if token:
        try:
            name, gen, *rest = json.loads(base64.urlsafe_b64decode(token.encode()))
            resume, after_empty = (str(name), int(gen)), bool(rest and rest[0])
        except (ValueError, TypeError):
            fail(response, HTTPStatus.BAD_REQUEST, "invalid", "Invalid pageToken")
            return
    candidates = list((storage.objects.get(bucket) or {}).values())
    if truthy(query_value(request, "versions")):
        candidates += [obj for gens in (storage.noncurrent.get(bucket) or {}).values() for obj in gens.values()]
    entries: dict[tuple[str, int], dict[str, Any] | str] = {}
    for obj in candidates:
        name = obj["name"]
        if not name.startswith(prefix) or name < start or (end is not None and name >= end):
            continue
        if glob is not None and not gcs_glob_match(glob, name):
            continue
        rest = name[len(prefix) :]
        if delimiter and delimiter in rest:
            folder = prefix + rest.split(delimiter, 1)[0] + delimiter
            entries[(folder, -1)] = folder
        else:
            entries[(name, int(obj["generation"]))] = obj
    ordered = sorted(k for k in entries if resume is None or k >= resume)
    if empty_pages and ordered and not after_empty:
        token = base64.urlsafe_b64encode(json.dumps([*ordered[0], 1]).encode()).decode()
        response.json({"kind": "storage#objects", "items": [], "prefixes": [], "nextPageToken": token})
        return
    chosen, more = ordered[:page], ordered[page:]
    answer: dict[str, Any] = {
        "kind": "storage#objects",
        "items": [entries[k] for k in chosen if isinstance(entries[k], dict)],
        "prefixes": [entries[k] for k in chosen if isinstance(entries[k], str)],
    }
    if more:
        answer["nextPageToken"] = base64.urlsafe_b64encode(json.dumps(list(more[0])).encode()).decode()
    response.json(answer)


def page_limit(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """POST /_blobgc/pages?bucket=B&limit=N&empty=1: short (and empty) pages of B's listings, a test hook."""
    bucket = query_value(request, "bucket") or ""
    if bucket not in storage.buckets:
        not_found(response, bucket)
        return
    try:
        limit = int(query_value(request, "limit") or "0")
    except ValueError:
        fail(response, HTTPStatus.BAD_REQUEST, "invalid", "limit must be a whole number")
        return
    empty = truthy(query_value(request, "empty"))
    if limit > 0 or empty:
        storage.page_limits[bucket] = (max(0, limit), empty)
    else:
        storage.page_limits.pop(bucket, None)
    response.json({"bucket": bucket, "limit": max(0, limit), "empty": empty})


def backdate(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """POST /_blobgc/backdate?bucket=B&key=K&seconds=N: the live object's times moved N seconds back."""
    bucket, key = query_value(request, "bucket") or "", query_value(request, "key") or ""
    try:
        seconds = float(query_value(request, "seconds") or "0")
    except ValueError:
        fail(response, HTTPStatus.BAD_REQUEST, "invalid", "seconds must be a number")
        return
    obj = storage.live(bucket, key)
    if obj is None:
        not_found(response, bucket, key)
        return
    for field in ("timeCreated", "updated"):
        moved = parse_time(obj[field]) - datetime.timedelta(seconds=seconds)
        obj[field] = moved.strftime(TIME_FORMAT)
    storage._write_config_to_file()
    response.json(obj)


# ---------------------------------------------------------------- batch
class SubRequest:
    """One call of a batch, shaped as the emulator's Request for its handlers."""

    def __init__(self, parent: Any, method: str, url: str, headers: dict[str, str], body: bytes) -> None:
        parsed = urllib.parse.urlparse(url)
        self.method, self.path = method, parsed.path
        self.query = urllib.parse.parse_qs(parsed.query)
        self.base_url = parent.base_url
        self.full_url = parent.base_url + parsed.path + (f"?{parsed.query}" if parsed.query else "")
        self._headers = {k.lower(): v for k, v in headers.items()}
        content_type = self._headers.get("content-type", "")
        self.data: Any = (
            json.loads(body) if body.strip() and content_type.startswith("application/json") else (body or None)
        )
        self._match: re.Match[str] | None = None

    @property
    def params(self) -> dict[str, str] | None:
        if self._match is None:
            return None
        return {k: urllib.parse.unquote(v) for k, v in self._match.groupdict().items() if v is not None}

    def get_header(self, key: str, default: str | None = None) -> str | None:
        return self._headers.get(key.lower(), default)

    def set_match(self, match: re.Match[str]) -> None:
        self._match = match


class SubResponse:
    """One answer of a batch, shaped as the emulator's Response for its handlers."""

    def __init__(self) -> None:
        self.status: HTTPStatus = HTTPStatus.OK
        self.headers: dict[str, str] = {}
        self.content: bytes = b""

    def json(self, obj: Any) -> None:
        self.headers["Content-Type"] = "application/json; charset=UTF-8"
        self.content = json.dumps(obj).encode()

    def write(self, content: str) -> None:
        self.content += content.encode()

    def write_file(self, content: bytes, content_type: str | None = "application/octet-stream") -> None:
        if content_type:
            self.headers["Content-Type"] = content_type
        self.content = content

    def __setitem__(self, key: str, value: str) -> None:
        self.headers[key] = value

    def __getitem__(self, key: str) -> str:
        return self.headers[key]


def split_batch(request: Any) -> list[tuple[str | None, bytes]] | None:
    """The parts of a multipart/mixed batch body: (Content-ID, the nested HTTP request's bytes)."""
    content_type = request.get_header("Content-Type") or ""
    raw = emulator._decode_raw_data(emulator._read_raw_data(request._request_handler), request._request_handler)
    if not content_type.startswith("multipart/mixed") or not raw:
        return None
    message = email.parser.BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    if not message.is_multipart():
        return None
    parts = []
    for part in message.get_payload():
        payload = part.get_payload(decode=False)
        body = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        parts.append((part.get("Content-ID"), body))
    return parts


def answer_call(parent: Any, raw: bytes, storage: BlobgcStorage) -> SubResponse:
    """Route one nested request of a batch as the server routes a request of its own."""
    answer = SubResponse()
    head, _, body = raw.replace(b"\r\n", b"\n").partition(b"\n\n")
    lines = head.decode("utf-8").split("\n")
    method, url = lines[0].split(" ")[:2]
    headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
    sub = SubRequest(parent, method.upper(), url, {k.strip(): v.strip() for k, v in headers.items()}, body.rstrip())
    for pattern, handlers in emulator.HANDLERS:
        match = re.fullmatch(pattern, sub.path)
        if match:
            sub.set_match(match)
            handler = handlers.get(sub.method)
            if handler is None or handler is batch:
                fail(answer, HTTPStatus.NOT_IMPLEMENTED, "notImplemented", f"{sub.method} {sub.path} in a batch")
            else:
                handler(sub, answer, storage)
            return answer
    fail(answer, HTTPStatus.NOT_FOUND, "notFound", f"Not Found: {sub.path}")
    return answer


def batch(request: Any, response: Any, storage: BlobgcStorage) -> None:
    """The JSON API's batch endpoint: each part routed in order, answered with its Content-ID; 100 calls at most."""
    parts = split_batch(request)
    if parts is None:
        fail(response, HTTPStatus.BAD_REQUEST, "invalid", "A batch request is a multipart/mixed body of calls.")
        return
    if len(parts) > MAX_BATCH_CALLS:
        fail(
            response,
            HTTPStatus.BAD_REQUEST,
            "invalid",
            f"Too many calls in one batch: {len(parts)} (at most {MAX_BATCH_CALLS}).",
        )
        return
    boundary = "batch_" + secrets.token_hex(16)
    out: list[bytes] = []
    for content_id, raw in parts:
        answer = answer_call(request, raw, storage)
        answer_id = f"Content-ID: <response-{content_id.strip('<>')}>\r\n" if content_id else ""
        status = HTTPStatus(answer.status)
        head = "".join(f"{k}: {v}\r\n" for k, v in answer.headers.items())
        length = len(answer.content)
        out.append(
            f"--{boundary}\r\nContent-Type: application/http\r\n{answer_id}\r\n"
            f"HTTP/1.1 {status.value} {status.phrase}\r\n{head}Content-Length: {length}\r\n\r\n".encode()
            + answer.content
            + b"\r\n"
        )
    response["Content-Type"] = f"multipart/mixed; boundary={boundary}"
    response._content = b"".join(out) + f"--{boundary}--\r\n".encode()


# ---------------------------------------------------------------- the server
REPLACED: dict[Any, Handler] = {
    emulator_objects.ls: list_objects,
    emulator_objects.get: get_object,
    emulator_objects.delete: delete_object,
    emulator_objects.patch: patch_object,
    emulator_objects.rewrite: rewrite_object,
    emulator_objects.download: download,
    emulator_objects.insert: insert_object,
    emulator_objects.batch: batch,
    emulator_buckets.insert: insert_bucket,
}


def install_handlers() -> None:
    """Route the emulator's paths to the handlers above, and the backdate call first; let PATCH write holds."""
    # holds are object metadata the JSON API's PATCH writes (https://cloud.google.com/storage/docs/holding-objects)
    emulator_objects._WRITABLE_FIELDS = (*emulator_objects._WRITABLE_FIELDS, *HOLD_FIELDS)
    routes = [
        (rf"^{re.escape(BACKDATE_PATH)}$", {"POST": backdate}),
        (rf"^{re.escape(PAGES_PATH)}$", {"POST": page_limit}),
    ]
    for pattern, handlers in emulator.HANDLERS:
        routes.append((pattern, {method: REPLACED.get(handler, handler) for method, handler in handlers.items()}))
    emulator.HANDLERS = tuple(routes)
    emulator.objects.insert = insert_object  # the router's fallback for uploads POSTed without /upload


class RequestHandler(emulator.RequestHandler):  # type: ignore[misc]
    """The emulator's request handler, one request at a time under the storage's lock."""

    def route(self, method: str) -> None:
        with self.storage.lock:
            emulator.Router(self).handle(method)

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def do_PUT(self) -> None:
        self.route("PUT")

    def do_PATCH(self) -> None:
        self.route("PATCH")

    def do_DELETE(self) -> None:
        self.route("DELETE")


class ThreadedServer(http_server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def serve(host: str, port: int, data_dir: str) -> None:
    """Serve the JSON API on host:port until interrupted, with the state under `data_dir`."""
    install_handlers()
    storage = BlobgcStorage(data_dir)
    storage.flush_every(FLUSH_EVERY)
    httpd = ThreadedServer((host, port), lambda *args: RequestHandler(storage, *args))
    signal.signal(signal.SIGTERM, stop)  # `make down` stops the server by pid: the state is written first
    log.info(
        "GCS server (gcp-storage-emulator and blobgc's additions) on http://%s:%d, data in %s", host, port, data_dir
    )
    try:
        httpd.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        httpd.server_close()
        storage.flush()


def stop(signum: int, frame: Any) -> None:
    raise SystemExit(0)


# ---------------------------------------------------------------- buckets of the stack
NONCURRENT_RULE = {"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": 7}}


def call(endpoint: str, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One JSON API call; None on 404."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{endpoint.rstrip('/')}/storage/v1{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise
    return json.loads(text) if text else {}


def ensure_buckets(endpoint: str, names: list[str], versioned: bool) -> None:
    """Create the buckets that do not exist, and set versioning (with a 7-day noncurrent lifecycle rule) on each."""
    wanted: dict[str, Any] = {"versioning": {"enabled": versioned}}
    if versioned:
        wanted["lifecycle"] = {"rule": [NONCURRENT_RULE]}
    for name in names:
        found = call(endpoint, "GET", f"/b/{urllib.parse.quote(name, safe='')}")
        if found is None:
            call(endpoint, "POST", "/b?project=blobgc-local", {"name": name, **wanted})
        elif any(found.get(k) != v for k, v in wanted.items()):
            call(endpoint, "PATCH", f"/b/{urllib.parse.quote(name, safe='')}", wanted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=59100)
    parser.add_argument("--data", required=True, help="directory of the server's state")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serve(args.host, args.port, os.path.abspath(args.data))


if __name__ == "__main__":
    main()
