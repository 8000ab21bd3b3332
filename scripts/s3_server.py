#!/usr/bin/env python3
"""Run moto's standalone S3 server (the local stack's S3), answering quiet DeleteObjects as S3 does.

S3 and MinIO answer a DeleteObjects request that carries `<Quiet>true</Quiet>` with its errors
only. moto 5.2.5 ignores Quiet and serializes a `Deleted` entry for every key, which measured as
about half of its time on a 1000-key call (the rest is parsing the request and deleting). This
wrapper drops the `Deleted` list when the request asked for quiet mode, and only then; `Errors`
are always returned. Everything else is moto's own server, with its own arguments:

    python scripts/s3_server.py -H 127.0.0.1 -p 59000

Listing: moto answers every ListObjectsV2 call by scanning and sorting every key of the bucket,
whatever the prefix, so one page of a shard costs as much as the whole bucket (2.5 s a call at a
million objects). S3 and MinIO walk an ordered index. This server does the same for listings
without a delimiter: a sorted list of the bucket's key names, rebuilt only after the bucket's
keys change, and each page found by bisection. Listings with a delimiter stay moto's own.

Benchmark fixtures: moto stores about 150 PUTs/s here, so loading the half million objects a
benchmark deletes would take most of an hour. `POST /_blobgc/bulk-put?bucket=NAME[&age=SECONDS]` with a
body of `key<TAB>size` lines stores each object (`size` bytes) straight into moto's backend, as a PUT
would (dated `age` seconds ago, as the backdate call would), and answers with the count. It exists only in this local server (loopback, never in
production) and only loads data: every deletion a benchmark measures goes through the S3 API.

Outage drill: `PUT /_blobgc/outage?bucket=NAME` makes every S3 request on that bucket answer 503
ServiceUnavailable, as S3 does when it is down or shedding load, until `DELETE /_blobgc/outage?bucket=NAME`.
Other buckets are untouched. The runbook's backfill test uses it to make real DAG runs fail on S3.

Aging (docs/reference.md §1): `POST /_blobgc/backdate?bucket=B&key=K&seconds=N` moves the current version of
that object's `LastModified` N seconds into the past; listings and HEAD then report the new time.
404 when there is no such object (or its current version is a delete marker). A run's cut-offs never
pass the present, so tests and the demo make objects old this way, as they backdate rows in SQL.
"""
from __future__ import annotations

import bisect
from datetime import timedelta
import re
import sys

import moto.server
from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.s3.models import FakeDeleteMarker, FakeTableStorageBucket, S3Backend, s3_backends
from moto.s3.utils import _VersionedKeyStore
from moto.s3.responses import S3Response
from werkzeug.wrappers import Request, Response

BULK_PUT_PATH = "/_blobgc/bulk-put"
OUTAGE_PATH = "/_blobgc/outage"
BACKDATE_PATH = "/_blobgc/backdate"
OUTAGE_BODY = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ServiceUnavailable</Code>"
               b"<Message>blobgc outage drill: this bucket is down</Message></Error>")


def bump_version(method_name: str):
    original = getattr(_VersionedKeyStore, method_name)

    def mutating(self, *args, **kwargs):
        self.__dict__["blobgc_version"] = self.__dict__.get("blobgc_version", 0) + 1
        return original(self, *args, **kwargs)

    return mutating


for _name in ("__setitem__", "__delitem__", "pop", "setlist", "clear", "update", "setdefault"):
    setattr(_VersionedKeyStore, _name, bump_version(_name))


def sorted_names(store: _VersionedKeyStore) -> list[str]:
    version = store.__dict__.get("blobgc_version", 0)
    cached = store.__dict__.get("blobgc_sorted")
    if cached is None or cached[0] != version:
        cached = (version, sorted(dict.keys(store)))
        store.__dict__["blobgc_sorted"] = cached
    return cached[1]


moto_list_objects_v2 = S3Backend.list_objects_v2


def list_objects_v2_from_index(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys):
    """moto's ListObjectsV2 for listings without a delimiter, from a sorted index of the bucket's keys."""
    if delimiter or isinstance(bucket, FakeTableStorageBucket):
        return moto_list_objects_v2(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys)
    names = sorted_names(bucket.keys)
    prefix = prefix or ""
    after = self._pagination_tokens.get(continuation_token) if continuation_token else start_after
    position = bisect.bisect_left(names, prefix)
    if after:
        position = max(position, bisect.bisect_right(names, after))
    found = []
    while position < len(names) and names[position].startswith(prefix) and len(found) <= max_keys:
        key = bucket.keys.get(names[position])
        if key is not None and not isinstance(key, FakeDeleteMarker):
            found.append(key)
        position += 1
    return self._truncate_result(found, max_keys)


S3Backend.list_objects_v2 = list_objects_v2_from_index

QUIET = re.compile(rb"<Quiet>\s*true\s*</Quiet>", re.IGNORECASE)
moto_delete_keys = S3Response._bucket_response_delete_keys


def delete_keys_honouring_quiet(self: S3Response, bucket_name: str, authenticated: bool = True):
    body = self.body if isinstance(self.body, bytes) else str(self.body or "").encode()
    if not QUIET.search(body):
        return moto_delete_keys(self, bucket_name, authenticated)
    serialized = self.serialized  # moto builds one S3Response per request, so this is not shared

    def errors_only(result):
        payload = result.result
        if isinstance(payload, dict):
            payload["Deleted"] = []
        return serialized(result)

    self.serialized = errors_only
    try:
        return moto_delete_keys(self, bucket_name, authenticated)
    finally:
        del self.serialized


S3Response._bucket_response_delete_keys = delete_keys_honouring_quiet


class WithBulkPut(DomainDispatcherApplication):
    """moto's WSGI application, plus the benchmark fixture loader at BULK_PUT_PATH and the outage drill."""

    buckets_down: set[str] = set()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == OUTAGE_PATH:
            return self.outage(Request(environ))(environ, start_response)
        if path == BACKDATE_PATH:
            return self.backdate(Request(environ))(environ, start_response)
        if self.buckets_down and path.split("/", 2)[1] in self.buckets_down:
            return Response(OUTAGE_BODY, 503, content_type="application/xml")(environ, start_response)
        if path != BULK_PUT_PATH:
            return super().__call__(environ, start_response)
        request = Request(environ)
        bucket = request.args.get("bucket", "")
        age = timedelta(seconds=float(request.args.get("age", "0") or 0))  # as if written that long ago
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        stored = 0
        try:
            for line in request.get_data().splitlines():
                key, size = line.decode().rsplit("\t", 1)
                obj = backend.put_object(bucket, key, key.encode()[:1] * int(size))
                if age:
                    obj.last_modified = obj.last_modified - age
                stored += 1
        except Exception as error:  # noqa: BLE001 - report any fixture error to the caller
            return Response(f"bulk put failed after {stored} objects: {error!r}", 400)(environ, start_response)
        return Response(str(stored), 200)(environ, start_response)


    def backdate(self, request: Request) -> Response:
        """Move an object's LastModified into the past (local stack only: there is no such call in S3)."""
        if request.method != "POST":
            return Response("POST only", 405)
        bucket, key = request.args.get("bucket", ""), request.args.get("key", "")
        try:
            seconds = float(request.args.get("seconds", ""))
        except ValueError:
            return Response("seconds must be a number", 400)
        if not bucket or not key or seconds < 0:
            return Response("bucket, key and seconds >= 0 are required", 400)
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        try:
            obj = backend.get_object(bucket, key)
        except Exception:  # noqa: BLE001 - moto raises for a missing bucket
            obj = None
        if obj is None:
            return Response(f"no object {bucket}/{key}", 404)
        obj.last_modified = obj.last_modified - timedelta(seconds=seconds)
        return Response(obj.last_modified_ISO8601, 200)

    def outage(self, request: Request) -> Response:
        bucket = request.args.get("bucket", "")
        if not bucket:
            return Response("bucket is required", 400)
        if request.method == "PUT":
            self.buckets_down.add(bucket)
        elif request.method == "DELETE":
            self.buckets_down.discard(bucket)
        return Response(" ".join(sorted(self.buckets_down)), 200)


moto.server.DomainDispatcherApplication = WithBulkPut

if __name__ == "__main__":
    sys.exit(moto.server.main())
