"""blobgc.core.objects.copy_verified on the local S3 server: one CopyObject up to the threshold, a multipart copy above
it (a 6 GiB object included, which neither the server nor the test holds in memory), verified, and refused or
aborted when the source changes under it."""
from __future__ import annotations

import hashlib
import os
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from blobgc.core.objects import CopiedObject, SourceChanged, copy_part_size, copy_verified, multipart_etag

MiB = 1024**2
GiB = 1024**3


class Recording:
    """An object store that forwards every call to the S3 client, recording its name, and runs `before(name, kwargs)`
    first (a test's way of changing the bucket at a chosen moment)."""

    def __init__(self, inner, before=None):
        self.inner = inner
        self.calls: list[str] = []
        self.before = before

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        def call(**kwargs):
            self.calls.append(name)
            if self.before is not None:
                self.before(name, kwargs)
            return method(**kwargs)

        return call


def sparse_put(bucket: str, key: str, size: int) -> str:
    """The S3 server's fixture call: an object of `size` zero bytes backed by a sparse file; returns its ETag."""
    query = urllib.parse.urlencode({"bucket": bucket, "key": key, "size": size})
    request = urllib.request.Request(f"{os.environ['BLOBGC_S3_ENDPOINT']}/_blobgc/sparse-put?{query}", method="POST")
    with urllib.request.urlopen(request, timeout=120) as answer:
        return answer.read().decode().strip('"')


def listening_pid(port: int) -> int:
    """The pid of the process listening on 127.0.0.1:`port` (the S3 server), found through /proc."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:  # another user's process, or one that just ended
            continue
    raise AssertionError(f"no process listens on port {port}")


def rss(pid: int) -> int:
    """A process's resident memory, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class PeakRss:
    """Samples a process's RSS every 20 ms while in the block: `peak`, and `before` it started."""

    def __init__(self, pid: int) -> None:
        self.pid, self.before, self.peak = pid, rss(pid), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss(self.pid))
            self._stop.wait(0.02)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss(self.pid))


def test_small_object_is_copied_by_one_copy_object_verified_by_size_and_etag_and_source_untouched(s3, bucket):
    body = b"a small object\n" * 100
    s3.put_object(Bucket=bucket, Key="src/small", Body=body, Metadata={"owner": "blobgc"})
    before = s3.head_object(Bucket=bucket, Key="src/small")
    store = Recording(s3)

    copied = copy_verified(store, bucket, "src/small", ".q/small")

    md5 = hashlib.md5(body).hexdigest()
    assert copied == CopiedObject(".q/small", len(body), md5, md5, 0)
    assert store.calls == ["head_object", "copy_object", "head_object"]
    assert s3.get_object(Bucket=bucket, Key=".q/small")["Body"].read() == body
    after = s3.head_object(Bucket=bucket, Key="src/small")
    assert (after["ETag"], after["LastModified"], after["Metadata"]) == (
        before["ETag"], before["LastModified"], {"owner": "blobgc"})
    assert s3.get_object(Bucket=bucket, Key="src/small")["Body"].read() == body
    assert s3.head_object(Bucket=bucket, Key=".q/small")["Metadata"] == {"owner": "blobgc"}


def test_source_written_again_between_head_and_copy_fails_and_leaves_no_copy(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src/k", Body=b"the bytes to quarantine")

    def overwrite_after_head(name, kwargs):
        if name == "copy_object":  # the HEAD has answered: the source changes before the copy
            s3.put_object(Bucket=bucket, Key="src/k", Body=b"written again meanwhile")

    with pytest.raises(SourceChanged, match="ETag is no longer"):
        copy_verified(Recording(s3, overwrite_after_head), bucket, "src/k", ".q/k")

    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])] == ["src/k"]
    assert s3.get_object(Bucket=bucket, Key="src/k")["Body"].read() == b"written again meanwhile"


def test_multipart_copy_over_a_low_threshold_yields_identical_bytes_and_a_verified_multipart_etag(s3, bucket):
    body = os.urandom(12 * MiB)
    s3.put_object(Bucket=bucket, Key="src/mid", Body=body, ContentType="video/mp4", Metadata={"owner": "blobgc"})
    store = Recording(s3)

    copied = copy_verified(store, bucket, "src/mid", ".q/mid", multipart_threshold=5 * MiB, part_size=5 * MiB)

    part_md5s = [hashlib.md5(body[i : i + 5 * MiB]).hexdigest() for i in range(0, len(body), 5 * MiB)]
    assert copied == CopiedObject(".q/mid", len(body), multipart_etag(part_md5s), hashlib.md5(body).hexdigest(), 3)
    assert copied.etag.endswith("-3")
    assert store.calls.count("upload_part_copy") == 3
    assert "copy_object" not in store.calls
    assert s3.get_object(Bucket=bucket, Key=".q/mid")["Body"].read() == body
    head = s3.head_object(Bucket=bucket, Key=".q/mid")
    assert (head["ETag"].strip('"'), head["ContentType"], head["Metadata"]) == (
        copied.etag, "video/mp4", {"owner": "blobgc"})
    assert s3.get_object(Bucket=bucket, Key="src/mid")["Body"].read() == body


def test_six_gib_object_is_copied_by_multipart_copy_verified_and_deleted_without_being_held_in_memory(s3, bucket):
    size = 6 * GiB
    server = listening_pid(urllib.parse.urlsplit(os.environ["BLOBGC_S3_ENDPOINT"]).port)
    started = time.monotonic()
    source_etag = sparse_put(bucket, "src/huge", size)
    store = Recording(s3)

    with PeakRss(server) as memory:
        copied = copy_verified(store, bucket, "src/huge", ".q/huge")
    duration = time.monotonic() - started

    assert (copied.key, copied.size, copied.source_etag, copied.parts) == (".q/huge", size, source_etag, 12)
    head = s3.head_object(Bucket=bucket, Key=".q/huge")
    assert (head["ContentLength"], head["ETag"].strip('"')) == (size, copied.etag)
    zeros = hashlib.md5()
    for _ in range(512 * MiB // (8 * MiB)):
        zeros.update(bytes(8 * MiB))
    assert copied.etag == multipart_etag([zeros.hexdigest()] * 12)  # the parts' MD5s: 512 MiB of zeros each
    # 12 parts of the default 512 MiB, each copied by range; the test process never asked for the bytes
    assert store.calls.count("upload_part_copy") == 12
    assert "get_object" not in store.calls
    growth = memory.peak - memory.before
    print(f"6 GiB multipart copy: {duration:.1f} s; S3 server RSS {memory.before / MiB:.0f} MiB before, "
          f"peak {memory.peak / MiB:.0f} MiB")
    assert growth < 512 * MiB, f"the S3 server grew by {growth / MiB:.0f} MiB copying a 6 GiB object"
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": ".q/huge"}, {"Key": "src/huge"}], "Quiet": True})
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_failure_in_the_middle_of_a_multipart_copy_aborts_the_upload(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src/mid", Body=os.urandom(12 * MiB))
    parts_copied = []

    def change_source_after_first_part(name, kwargs):
        if name == "upload_part_copy":
            parts_copied.append(kwargs["PartNumber"])
            if len(parts_copied) == 2:  # part 1 is copied; the source changes before part 2
                s3.put_object(Bucket=bucket, Key="src/mid", Body=b"written again meanwhile")

    store = Recording(s3, change_source_after_first_part)
    with pytest.raises(SourceChanged):
        copy_verified(store, bucket, "src/mid", ".q/mid", multipart_threshold=5 * MiB, part_size=5 * MiB, concurrency=1)

    assert parts_copied == [1, 2]
    assert store.calls[-1] == "abort_multipart_upload"
    assert "complete_multipart_upload" not in store.calls
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])] == ["src/mid"]


def test_part_size_grows_to_stay_within_ten_thousand_parts():
    assert copy_part_size(6 * GiB, 512 * MiB) == 512 * MiB
    assert copy_part_size(5 * 1024 * GiB, 512 * MiB) == 525 * MiB  # S3's largest object: 9,987 parts of 525 MiB
    assert -(-5 * 1024 * GiB // (525 * MiB)) <= 10_000
    with pytest.raises(ValueError, match="part_size"):
        copy_part_size(6 * GiB, 4 * MiB)
