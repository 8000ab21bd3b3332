#!/usr/bin/env python3
"""Run moto's standalone S3 server (the local stack's S3), answering quiet DeleteObjects as S3 does.

S3 and MinIO answer a DeleteObjects request that carries `<Quiet>true</Quiet>` with its errors
only. moto 5.2.5 ignores Quiet and serializes a `Deleted` entry for every key, which measured as
about half of its time on a 1000-key call (the rest is parsing the request and deleting). This
wrapper drops the `Deleted` list when the request asked for quiet mode, and only then; `Errors`
are always returned. Everything else is moto's own server, with its own arguments:

    python scripts/s3_server.py -H 127.0.0.1 -p 59000

Benchmark fixtures: moto stores about 150 PUTs/s here, so loading the half million objects a
benchmark deletes would take most of an hour. `POST /_blobgc/bulk-put?bucket=NAME` with a body of
`key<TAB>size` lines stores each object (`size` bytes) straight into moto's backend, as a PUT
would, and answers with the count. It exists only in this local server (loopback, never in
production) and only loads data: every deletion a benchmark measures goes through the S3 API.
"""
from __future__ import annotations

import re
import sys

import moto.server
from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.s3.models import s3_backends
from moto.s3.responses import S3Response
from werkzeug.wrappers import Request, Response

BULK_PUT_PATH = "/_blobgc/bulk-put"

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
    """moto's WSGI application, plus the benchmark fixture loader at BULK_PUT_PATH."""

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") != BULK_PUT_PATH:
            return super().__call__(environ, start_response)
        request = Request(environ)
        bucket = request.args.get("bucket", "")
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        stored = 0
        try:
            for line in request.get_data().splitlines():
                key, size = line.decode().rsplit("\t", 1)
                backend.put_object(bucket, key, key.encode()[:1] * int(size))
                stored += 1
        except Exception as error:  # noqa: BLE001 - report any fixture error to the caller
            return Response(f"bulk put failed after {stored} objects: {error!r}", 400)(environ, start_response)
        return Response(str(stored), 200)(environ, start_response)


moto.server.DomainDispatcherApplication = WithBulkPut

if __name__ == "__main__":
    sys.exit(moto.server.main())
