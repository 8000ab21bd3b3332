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
without a delimiter: a sorted list of the bucket's key names, and each page found by bisection.
The index is rebuilt only when a name is added (a write to a name already there, a new version or
a delete marker, leaves it as it is); a deleted name stays in it, skipped by listings because the
store no longer holds it, until deleted names are half of it, so deleting never re-sorts a bucket.
Listings with a delimiter stay moto's own. moto then renders each page through its generic,
model-driven serializer, about 0.5 ms per listed object (0.5 s for a page of 1000; measured 1,690
objects/s through boto3). This server renders a ListObjectsV2 page without a delimiter, owners or
checksums itself: moto's serializer renders the page without its objects, and the <Contents>
elements moto would write (Key, LastModified, ETag, Size, StorageClass, escaped alike; with
encoding-type=url the keys moto quoted) are put in their place: 35 ms for a page of 1000. The answer
is byte for byte moto's own (same keys, sizes, ETags, LastModified including backdated ones,
versioned buckets' current versions only, delete markers hidden, prefix, start-after,
continuation-token, max-keys honoured): a request with the header `x-blobgc-moto-listing: 1` is
rendered by moto alone, and tests/core/test_objects.py compares the two.

Benchmark fixtures: moto stores about 150 PUTs/s here, so loading the half million objects a
benchmark deletes would take most of an hour. `POST /_blobgc/bulk-put?bucket=NAME[&age=SECONDS]` with a
body of `key<TAB>size` lines stores each object (`size` bytes) straight into moto's backend, as a PUT
would (dated `age` seconds ago, as the backdate call would), and answers with the count. It exists only in this local server (loopback, never in
production) and only loads data: every deletion a benchmark measures goes through the S3 API.

Outage drill: `PUT /_blobgc/outage?bucket=NAME` makes every S3 request on that bucket answer 503
ServiceUnavailable, as S3 does when it is down or shedding load, until `DELETE /_blobgc/outage?bucket=NAME`.
Other buckets are untouched. The runbook's backfill test uses it to make real DAG runs fail on S3.

Throttling (docs/reference.md §1): `POST /_blobgc/slowdown?bucket=B&count=N` makes the next N requests on bucket B
that delete (DeleteObject, DeleteObjects), copy (CopyObject, UploadPartCopy) or HEAD an object answer `503 SlowDown`,
as S3 does past its request rate; `count=0` clears it. Answers with the count left.

Aging (docs/reference.md §1): `POST /_blobgc/backdate?bucket=B&key=K&seconds=N` moves the current version of
that object's `LastModified` N seconds into the past; listings and HEAD then report the new time.
404 when there is no such object (or its current version is a delete marker). A run's cut-offs never
pass the present, so tests and the demo make objects old this way, as they backdate rows in SQL.

Large objects: moto reads a whole value into memory to copy it (CopyObject, UploadPartCopy) and joins every part
in memory to complete a multipart upload. Here those three calls stream from file to file (8 MiB at a time, a
sparse file's holes neither read nor written), so a multipart copy of a 6 GB object holds no more than a few
chunks; HEAD never reads a value. CopySourceIfMatch (`x-amz-copy-source-if-match`), which moto ignores, is honoured
on CopyObject and UploadPartCopy as S3 does: 412 PreconditionFailed when the source's ETag is another.
`POST /_blobgc/sparse-put?bucket=B&key=K&size=N` stores an object of N zero bytes backed by a sparse file (no byte
written, none in memory) and answers with its ETag: the MD5 of N zeros up to 5 GiB (what one PUT would give),
above it the ETag of the AWS CLI's upload in 8 MiB parts ("-N" suffix: S3 stores nothing larger from one PUT). A
fixture of the local stack only, for the tests of copies of objects over 5 GiB.
"""
from __future__ import annotations

import binascii
import bisect
import codecs
import errno
import functools
import hashlib
import os
import tempfile
import threading
from datetime import timedelta
import re
import sys

import moto.server
from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.core.compat import HAS_CRT
from moto.s3.exceptions import EntityTooSmall, InvalidPart, MalformedXML, PreconditionFailed
from moto.s3.models import (FakeDeleteMarker, FakeKey, FakeMultipart, FakeTableStorageBucket, S3Backend,
                            s3_backends)
from moto.s3.utils import _VersionedKeyStore, compute_checksum
from moto.settings import S3_UPLOAD_PART_MIN_SIZE, get_s3_default_key_buffer_size
from moto.s3.responses import S3Response
from werkzeug.wrappers import Request, Response
from xml.sax.saxutils import escape as xml_escape
from moto.core.responses import ActionResult, BaseResponse
from moto.utilities.aws_headers import gen_amzn_requestid_long

BULK_PUT_PATH = "/_blobgc/bulk-put"
SPARSE_PUT_PATH = "/_blobgc/sparse-put"
OUTAGE_PATH = "/_blobgc/outage"
BACKDATE_PATH = "/_blobgc/backdate"
SLOWDOWN_PATH = "/_blobgc/slowdown"
CREDENTIAL_SCOPE = re.compile(r"Credential=[^/,]+/\d{8}/([^/,]+)/([^/,]+)/aws4_request")
OUTAGE_BODY = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ServiceUnavailable</Code>"
               b"<Message>blobgc outage drill: this bucket is down</Message></Error>")
SLOWDOWN_BODY = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
                 b"<Message>Please reduce your request rate.</Message></Error>")


def bump_version(method_name: str):
    """A change that may add a name: the sorted index is rebuilt before the next listing."""
    original = getattr(_VersionedKeyStore, method_name)

    def mutating(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:  # after the change, as in bump_if_new
            self.__dict__["blobgc_version"] = self.__dict__.get("blobgc_version", 0) + 1

    return mutating


def bump_if_new(method_name: str):
    """Writing a name already in the index (a new version, a delete marker) leaves the index as it is."""
    original = getattr(_VersionedKeyStore, method_name)

    def writing(self, key, *args, **kwargs):
        new = not dict.__contains__(self, key)
        try:
            return original(self, key, *args, **kwargs)
        finally:
            if new:  # after the write: a listing that sorted the names meanwhile cached them under the old version
                self.__dict__["blobgc_version"] = self.__dict__.get("blobgc_version", 0) + 1

    return writing


def count_removal(method_name: str):
    """A removed name stays in the index, skipped by listings (it is no longer in the store), until removals are
    half of the index: deleting never re-sorts the bucket's names."""
    original = getattr(_VersionedKeyStore, method_name)

    def removing(self, *args, **kwargs):
        self.__dict__["blobgc_removed"] = self.__dict__.get("blobgc_removed", 0) + 1
        return original(self, *args, **kwargs)

    return removing


for _name in ("clear", "update"):
    setattr(_VersionedKeyStore, _name, bump_version(_name))
for _name in ("__setitem__", "setlist", "setdefault"):
    setattr(_VersionedKeyStore, _name, bump_if_new(_name))
for _name in ("__delitem__", "pop"):
    setattr(_VersionedKeyStore, _name, count_removal(_name))
index_lock = threading.Lock()


def sorted_names(store: _VersionedKeyStore) -> list[str]:
    """The bucket's key names in order, possibly with names removed since (a listing skips those)."""
    with index_lock:
        version = store.__dict__.get("blobgc_version", 0)
        cached = store.__dict__.get("blobgc_sorted")
        if cached is None or cached[0] != version or 2 * store.__dict__.get("blobgc_removed", 0) > len(cached[1]):
            store.__dict__["blobgc_removed"] = 0
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
        key = bucket.keys.get(names[position])  # None: removed since the index was sorted
        if key is not None and not isinstance(key, FakeDeleteMarker):
            found.append(key)
        position += 1
    return self._truncate_result(found, max_keys)


S3Backend.list_objects_v2 = list_objects_v2_from_index

# moto renders each response through a generic serializer driven by botocore's model, about 0.5 ms per listed
# object: 0.6 s for a page of 1000. A ListObjectsV2 page without a delimiter, owners or checksums
# is rendered here instead: moto's serializer renders the page without its objects (every other element, the
# headers), and the <Contents> elements are written into it as moto writes them, in the same order and with the
# same escaping. A request with the header SLOW_LISTING_HEADER is rendered by moto alone: the tests compare the two.
SLOW_LISTING_HEADER = "x-blobgc-moto-listing"
moto_serialized = S3Response.serialized


def listed_object(item: dict) -> str:
    storage = item.get("StorageClass")
    return (
        f"<Contents><Key>{xml_escape(item['Key'])}</Key><LastModified>{item['LastModified']}</LastModified>"
        f"<ETag>{xml_escape(item['ETag'])}</ETag><Size>{item['Size']}</Size>"
        + (f"<StorageClass>{xml_escape(storage)}</StorageClass>" if storage is not None else "")
        + "</Contents>"
    )


def serialized_listing_fast(self: S3Response, action_result: ActionResult):
    result = action_result.result
    if (
        self.data.get("Action") != "ListObjectsV2"
        or not isinstance(result, dict)
        or "Delimiter" in result
        or not result.get("Contents")
        or self.headers.get(SLOW_LISTING_HEADER)
        or any(set(item) - FAST_FIELDS for item in result["Contents"])
    ):
        return moto_serialized(self, action_result)
    status, headers, body = moto_serialized(self, ActionResult({**result, "Contents": []}))
    text = body.decode() if isinstance(body, bytes) else body
    at = text.index(IS_TRUNCATED_END) + len(IS_TRUNCATED_END)
    text = text[:at] + "".join(listed_object(item) for item in result["Contents"]) + text[at:]
    return status, headers, text.encode() if isinstance(body, bytes) else text


# Two costs moto pays on every listed object or answer, cut without changing a byte: the ISO 8601 form of an object's
# LastModified (strftime, per object and listing) is kept with the object until its time changes (a backdate); and
# every answer's body went through a regular expression that puts the request id between <RequestId> tags (a tenth of
# a listing page's time on a 200 KB page): an answer without the tag is returned as it is, which is what the
# expression does to it.
moto_enrich_response = BaseResponse._enrich_response


def enrich_response_without_scanning(headers, body):
    if isinstance(body, str | bytes) and ("<RequestId>" if isinstance(body, str) else b"<RequestId>") not in body:
        if "status" in headers:
            headers["status"] = str(headers["status"])
        gen_amzn_requestid_long(headers)
        return headers, body
    return moto_enrich_response(headers, body)


BaseResponse._enrich_response = staticmethod(enrich_response_without_scanning)
moto_last_modified_iso = FakeKey.last_modified_ISO8601


def last_modified_iso_kept(self: FakeKey) -> str:
    kept = self.__dict__.get("blobgc_last_modified_iso")
    if kept is None or kept[0] != self.last_modified:
        kept = (self.last_modified, moto_last_modified_iso.fget(self))
        self.__dict__["blobgc_last_modified_iso"] = kept
    return kept[1]


FakeKey.last_modified_ISO8601 = property(last_modified_iso_kept)

FAST_FIELDS = frozenset({"Key", "LastModified", "ETag", "Size", "StorageClass"})
IS_TRUNCATED_END = "</IsTruncated>"
S3Response.serialized = serialized_listing_fast

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


# Large objects, streamed. moto keeps each object's bytes in a SpooledTemporaryFile (a file on disk past 5 MiB), but
# reads whole values into memory to copy them: CopyObject, UploadPartCopy (the whole source, then a slice) and
# CompleteMultipartUpload (every part, joined, then written again). A multipart copy of a 6 GB object would hold
# 12 GB. Below, those three calls stream from file to file, CHUNK bytes at a time, computing the ETags (and the
# checksum a multipart upload declared) on the way, and they keep a sparse source sparse: the ranges a file never
# had written (SEEK_HOLE) are neither read nor written, and count as zeros. HEAD reads no value (the ETag is kept).
CHUNK = 8 * 1024 * 1024
ZEROS = bytes(CHUNK)
SINGLE_PUT_LIMIT = 5 * 1024**3  # S3's largest single PUT: larger objects only exist as multipart uploads
CLI_PART = 8 * 1024 * 1024  # the AWS CLI's default multipart chunk


class StreamedValue:
    """A value already written to a key's file buffer, with its size and ETag: FakeKey adopts the buffer."""

    def __init__(self, buffer: tempfile.SpooledTemporaryFile, size: int, etag: str | None) -> None:
        self.buffer, self.size, self.etag = buffer, size, etag


moto_value = FakeKey.value


def set_value(self: FakeKey, new_value) -> None:
    """moto's FakeKey.value setter, which also adopts a StreamedValue's buffer instead of copying bytes."""
    if not isinstance(new_value, StreamedValue):
        return moto_value.fset(self, new_value)
    empty, self._value_buffer = self._value_buffer, new_value.buffer
    self.contentsize = new_value.size
    if self._etag is None:
        self._etag = new_value.etag
    if empty is not new_value.buffer:
        empty.close()


FakeKey.value = property(moto_value.fget, set_value)


def pieces(key: FakeKey, start: int, length: int):
    """(offset from start, bytes or None for a hole, size) covering key's value[start:start + length], CHUNK bytes
    at most each; a file's holes are not read. The file is read through a descriptor of its own (pread)."""
    buffer = key._value_buffer
    with key.lock:
        buffer.flush()
    if not buffer._rolled:  # a small value, in memory
        data = buffer._file.getvalue()[start : start + length]
        for at in range(0, len(data), CHUNK):
            yield at, data[at : at + CHUNK], len(data[at : at + CHUNK])
        return
    fd = os.open(f"/proc/self/fd/{buffer._file.fileno()}", os.O_RDONLY)
    try:
        position, end = start, start + length
        while position < end:
            try:
                data_at = min(os.lseek(fd, position, os.SEEK_DATA), end)
            except OSError as error:
                if error.errno != errno.ENXIO:  # ENXIO: no data after position, only a hole to the end
                    raise
                data_at = end
            if data_at > position:
                yield position - start, None, data_at - position
            if data_at >= end:
                break
            hole_at = min(os.lseek(fd, data_at, os.SEEK_HOLE), end)
            while data_at < hole_at:
                chunk = os.pread(fd, min(CHUNK, hole_at - data_at), data_at)
                if not chunk:
                    raise OSError(f"short read of {key.name} at {data_at}")
                yield data_at - start, chunk, len(chunk)
                data_at += len(chunk)
            position = hole_at
    finally:
        os.close(fd)


def zero_runs(size: int):
    """`size` zero bytes, CHUNK at most at a time (shared memory, never allocated)."""
    view = memoryview(ZEROS)
    while size > 0:
        yield view[: min(CHUNK, size)]
        size -= CHUNK


@functools.lru_cache(maxsize=64)
def zero_md5(size: int) -> bytes:
    """The MD5 digest of `size` zero bytes (a whole part of a sparse file's hole: computed once per size)."""
    digest = hashlib.md5(usedforsecurity=False)
    for run in zero_runs(size):
        digest.update(run)
    return digest.digest()


def zero_etag(size: int) -> str:
    """The ETag S3 gives `size` zero bytes: their MD5 when one PUT can store them (up to 5 GiB); above, as the AWS CLI
    uploads them, in 8 MiB parts: md5 of the parts' binary MD5s, then "-" and the number of parts."""
    if size <= SINGLE_PUT_LIMIT:
        return zero_md5(size).hex()
    whole, rest = divmod(size, CLI_PART)
    digests = zero_md5(CLI_PART) * whole + (zero_md5(rest) if rest else b"")
    return f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{whole + (1 if rest else 0)}"


class Writer:
    """A new key's file buffer of `size` bytes, written piece by piece; holes stay holes (the file is truncated to
    its size first, as a sparse file)."""

    def __init__(self, size: int) -> None:
        self.buffer = tempfile.SpooledTemporaryFile(get_s3_default_key_buffer_size())
        self.size = size
        self.fd: int | None = None
        if size > self.buffer._max_size:
            self.buffer.rollover()
            self.fd = self.buffer._file.fileno()
            os.ftruncate(self.fd, size)

    def put(self, at: int, data: bytes | None, size: int) -> None:
        if self.fd is not None:
            if data is not None:
                written = 0
                while written < size:
                    written += os.pwrite(self.fd, memoryview(data)[written:], at + written)
            return
        self.buffer.seek(at)
        self.buffer.write(data if data is not None else ZEROS[:size])


class StreamingChecksum:
    """A checksum of a value fed in pieces, per algorithm as moto computes it (CRC32C and CRC64NVME fall back to
    CRC32 without their optional libraries, as moto's compute_checksum does)."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self.hash = None
        self.crc = 0
        if algorithm in ("SHA1", "SHA256"):
            self.hash = hashlib.new(algorithm.lower(), usedforsecurity=False)
        self.width = 8 if algorithm == "CRC64NVME" and HAS_CRT else 4

    def update(self, data) -> None:
        if self.hash is not None:
            self.hash.update(data)
        elif self.algorithm == "CRC64NVME" and HAS_CRT:
            from awscrt import checksums

            self.crc = checksums.crc64nvme(bytes(data), self.crc)
        elif self.algorithm == "CRC32C":
            try:
                import crc32c

                self.crc = crc32c.crc32c(data, self.crc)
            except ImportError:
                self.crc = binascii.crc32(data, self.crc)
        else:
            self.crc = binascii.crc32(data, self.crc)

    def digest(self) -> bytes:
        return self.hash.digest() if self.hash is not None else self.crc.to_bytes(self.width, "big")


def copy_value(key: FakeKey, start: int, length: int) -> StreamedValue:
    """key's value[start:start + length] into a new file buffer, with its MD5, streaming (holes stay holes)."""
    writer = Writer(length)
    digest = hashlib.md5(usedforsecurity=False)
    whole_hole = None
    for at, data, size in pieces(key, start, length):
        writer.put(at, data, size)
        if data is None and at == 0 and size == length:
            whole_hole = zero_md5(length)  # a part wholly in a hole: its MD5 is computed once per size
        elif data is None:
            for run in zero_runs(size):
                digest.update(run)
        else:
            digest.update(data)
    if length == 0:
        whole_hole = digest.digest()
    return StreamedValue(writer.buffer, length, (whole_hole or digest.digest()).hex())


def complete_streaming(self: FakeMultipart, body):
    """moto's FakeMultipart.complete, joining the parts into the new key's file buffer by streaming; the checksum
    is computed (on the way) only when the upload declared an algorithm, the only case where S3 reports one."""
    algorithm = self.metadata.get("x-amz-checksum-algorithm")
    composite = (self.metadata.get("x-amz-checksum-type") or "").upper() == "COMPOSITE" or (
        algorithm and algorithm != "CRC64NVME" and not self.metadata.get("x-amz-checksum-type"))
    decode_hex = codecs.getdecoder("hex_codec")
    parts, md5s, last = [], bytearray(), None
    for number, etag in body:
        part = self.parts.get(number)
        if part is None or part.etag.replace('"', "") != etag.replace('"', ""):
            raise InvalidPart()
        if last is not None and last.contentsize < S3_UPLOAD_PART_MIN_SIZE:
            raise EntityTooSmall()
        md5s.extend(decode_hex(part.etag.replace('"', ""))[0])
        parts.append(part)
        last = part
    if not parts:
        raise MalformedXML
    writer = Writer(sum(part.size for part in parts))
    whole = StreamingChecksum(algorithm) if algorithm and not composite else None
    part_digests = bytearray()
    position = 0
    for part in parts:
        each = StreamingChecksum(algorithm) if algorithm and composite else None
        for at, data, size in pieces(part, 0, part.size):
            writer.put(position + at, data, size)
            for summer in (s for s in (whole, each) if s is not None):
                for run in ([data] if data is not None else zero_runs(size)):
                    summer.update(run)
        if each is not None:
            part_digests.extend(each.digest())
        position += part.size
    checksum = None
    if whole is not None:
        checksum = ("FULL_OBJECT", binascii.b2a_base64(whole.digest(), newline=False).decode(), 1)
    elif algorithm:
        checksum = ("COMPOSITE", compute_checksum(bytes(part_digests), algorithm).decode(), len(parts))
    etag = f"{hashlib.md5(bytes(md5s), usedforsecurity=False).hexdigest()}-{len(parts)}"
    return StreamedValue(writer.buffer, writer.size, None), etag, checksum


FakeMultipart.complete = complete_streaming

# x-amz-copy-source-if-match (boto3's CopySourceIfMatch), which moto 5.2.5 ignores: S3 copies only when the source's
# ETag is the one named, and answers 412 PreconditionFailed otherwise. Checked on the very key that is then copied.
copy_condition = threading.local()


def check_copy_source(key: FakeKey) -> None:
    wanted = getattr(copy_condition, "etag", None)
    if wanted and key.etag.replace('"', "") != wanted.replace('"', ""):
        raise PreconditionFailed("x-amz-copy-source-If-Match")


def with_copy_condition(handler):
    def conditional(self: S3Response):
        copy_condition.etag = self.headers.get("x-amz-copy-source-if-match")
        try:
            return handler(self)
        finally:
            copy_condition.etag = None

    return conditional


S3Response.copy_object = with_copy_condition(S3Response.copy_object)
S3Response.upload_part_copy = with_copy_condition(S3Response.upload_part_copy)


def upload_part_copy_streaming(self: S3Backend, dest_bucket_name, multipart_id, part_id, src_bucket_name,
                               src_key_name, src_version_id, start_byte, end_byte) -> FakeKey:
    """moto's UploadPartCopy, streaming the source's range into the part."""
    multipart = self.get_bucket(dest_bucket_name).multiparts[multipart_id]
    source = self.get_object(src_bucket_name, src_key_name, version_id=src_version_id)
    check_copy_source(source)
    start = 0 if start_byte is None else start_byte
    end = source.size if start_byte is None else min(end_byte + 1, source.size)
    return multipart.set_part(part_id, copy_value(source, start, max(0, end - start)))


S3Backend.upload_part_copy = upload_part_copy_streaming


class StreamedSource:
    """A key to copy, whose `value` is a streamed copy of its buffer (moto's copy_object reads `value` once)."""

    def __init__(self, key: FakeKey) -> None:
        self._key = key

    def __getattr__(self, name: str):
        return getattr(self._key, name)

    @property
    def value(self) -> StreamedValue:
        return copy_value(self._key, 0, self._key.size)


moto_copy_object = S3Backend.copy_object


def copy_object_streaming(self: S3Backend, src_key: FakeKey, *args, **kwargs):
    """moto's CopyObject, streaming the value from file to file."""
    check_copy_source(src_key)
    return moto_copy_object(self, StreamedSource(src_key), *args, **kwargs)


S3Backend.copy_object = copy_object_streaming


def sparse_put(backend: S3Backend, bucket: str, key: str, size: int) -> FakeKey:
    """Store a `size`-byte object of zeros backed by a sparse file: no byte is written, none held in memory."""
    writer = Writer(size)
    if writer.fd is None:
        writer.put(0, None, size)
    return backend.put_object(bucket, key, StreamedValue(writer.buffer, size, zero_etag(size)))


class WithBulkPut(DomainDispatcherApplication):
    """moto's WSGI application, plus the benchmark fixture loader at BULK_PUT_PATH and the outage drill."""

    buckets_down: set[str] = set()
    resolved: dict[tuple, object] = {}  # (host, region, service) -> moto's application for it (see get_application)
    slowdowns: dict[str, int] = {}  # bucket -> requests that delete, copy or HEAD still to answer SlowDown
    slowdown_lock = threading.Lock()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == OUTAGE_PATH:
            return self.outage(Request(environ))(environ, start_response)
        if path == SLOWDOWN_PATH:
            return self.slowdown(Request(environ))(environ, start_response)
        if self.slowdowns and self.slowed_down(environ, path):
            body = b"" if environ.get("REQUEST_METHOD") == "HEAD" else SLOWDOWN_BODY
            return Response(body, 503, content_type="application/xml")(environ, start_response)
        if path == BACKDATE_PATH:
            return self.backdate(Request(environ))(environ, start_response)
        if path == SPARSE_PUT_PATH:
            return self.sparse_put(Request(environ))(environ, start_response)
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
                obj.etag  # noqa: B018 - computed now, as a PUT's answer computes it: not by the first listing
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

    def sparse_put(self, request: Request) -> Response:
        """Store an object of `size` zero bytes backed by a sparse file (local stack only: a fixture)."""
        if request.method != "POST":
            return Response("POST only", 405)
        bucket, key = request.args.get("bucket", ""), request.args.get("key", "")
        try:
            size = int(request.args.get("size", ""))
        except ValueError:
            return Response("size must be an integer", 400)
        if not bucket or not key or size < 0:
            return Response("bucket, key and size >= 0 are required", 400)
        try:
            obj = sparse_put(s3_backends[DEFAULT_ACCOUNT_ID]["aws"], bucket, key, size)
        except Exception as error:  # noqa: BLE001 - report any fixture error (no such bucket) to the caller
            return Response(f"sparse put failed: {error!r}", 400)
        return Response(obj.etag, 200)

    def get_application(self, environ):
        """moto's application for a request, found once per host and credential scope: moto looks for it anew on
        every request, under one lock (listing its modules' folders, matching every service's URL patterns),
        which cost a fifth of the server's time under a drain. Requests it finds otherwise (no signature
        header, moto's own API) are left to it."""
        path = environ.get("PATH_INFO", "")
        scope = CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
        if scope is None or path.startswith(("/moto-api", "/latest/", "/v20180820")) or path == "/favicon.ico":
            return super().get_application(environ)
        key = (environ.get("HTTP_HOST"), scope.group(1), scope.group(2))
        app = self.resolved.get(key)
        if app is None:
            app = self.resolved[key] = super().get_application(environ)
        return app

    def slowdown(self, request: Request) -> Response:
        """Answer SlowDown to the next `count` requests on a bucket that delete, copy or HEAD an object."""
        if request.method != "POST":
            return Response("POST only", 405)
        bucket = request.args.get("bucket", "")
        try:
            count = int(request.args.get("count", ""))
        except ValueError:
            return Response("count must be an integer", 400)
        if not bucket or count < 0:
            return Response("bucket and count >= 0 are required", 400)
        with self.slowdown_lock:
            if count:
                self.slowdowns[bucket] = count
            else:
                self.slowdowns.pop(bucket, None)
        return Response(str(count), 200)

    def slowed_down(self, environ, path: str) -> bool:
        """Whether this request deletes, copies or HEADs an object of a bucket owed SlowDowns (and takes one)."""
        bucket, _, key = path.lstrip("/").partition("/")
        if bucket not in self.slowdowns:
            return False
        method, query = environ.get("REQUEST_METHOD", ""), environ.get("QUERY_STRING", "")
        params = {q.split("=", 1)[0] for q in query.split("&") if q}
        per_object = (
            (method == "HEAD" and key)
            or (method == "DELETE" and key and "uploadId" not in params)  # not an upload's abort
            or (method == "POST" and not key and "delete" in params)  # DeleteObjects
            or (method == "PUT" and key and "HTTP_X_AMZ_COPY_SOURCE" in environ)  # CopyObject, UploadPartCopy
        )
        if not per_object:
            return False
        with self.slowdown_lock:
            left = self.slowdowns.get(bucket, 0)
            if left <= 0:
                return False
            if left == 1:
                self.slowdowns.pop(bucket)
            else:
                self.slowdowns[bucket] = left - 1
        return True

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
