#!/usr/bin/env python3
"""Run moto's standalone S3 server (the local stack's S3), answering quiet DeleteObjects as S3 does.

S3 and MinIO answer a DeleteObjects request that carries `<Quiet>true</Quiet>` with its errors
only. moto 5.2.5 ignores Quiet and serializes a `Deleted` entry for every key, which measured as
about half of its time on a 1000-key call (the rest is parsing the request and deleting). This
wrapper drops the `Deleted` list when the request asked for quiet mode, and only then; `Errors`
are always returned. Everything else is moto's own server, with its own arguments:

    python scripts/s3_server.py -H 127.0.0.1 -p 59000
"""
from __future__ import annotations

import re
import sys

from moto.s3.responses import S3Response
from moto.server import main

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

if __name__ == "__main__":
    sys.exit(main())
