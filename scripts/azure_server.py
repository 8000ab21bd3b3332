"""The local Azure Blob Storage server of the stack: Azurite (npm), behind a small front that adds what it lacks.

`python scripts/azure_server.py --host 127.0.0.1 --port 59200 --data DIR` installs Azurite 3.35.0 into
`.blobgc/azurite/` when it is absent (`npm install --prefix`; 3.35.0 is the newest release whose `engines` allow
Node 20, Azurite 3.36+ needs Node 21+), runs its blob service on port+1 (loopback only, loose mode, telemetry off,
`--inMemoryPersistence`: many times the batch deletes a second of its on-disk store; the S3 server is in memory too)
and serves the public port with a reverse proxy to it. Every request is Azurite's own,
forwarded byte for byte (the client's Shared Key signature is Azurite's to check), except what follows. Azurite
3.35.0 has Blob Batch (https://learn.microsoft.com/rest/api/storageservices/blob-batch), leases, Copy Blob with
source conditions and destination conditions (If-None-Match: *, forwarded to it also on a copy from a version) and
Content-MD5; it lacks these parts of the real service, which blobgc's Azure store uses, and
this front is the project's stand-in for each, written to the real service's documented behaviour:

- Blob versioning (https://learn.microsoft.com/azure/storage/blobs/versioning-overview): a write (Put Blob, Put
  Block List, Copy Blob, Set Blob Metadata) on a versioned container makes the current blob a previous version and
  answers `x-ms-version-id` (the version's creation time, 7 fractional digits, as Azure's); Delete Blob makes the
  current version a previous one (no current version is left); `versionid=` on Get Blob, Get Blob Properties and
  Delete Blob (https://learn.microsoft.com/rest/api/storageservices/delete-blob) reads or deletes one previous
  version for good; Copy Blob from a version's URL (`...?versionid=`) copies it, which is how a previous version is
  restored (https://learn.microsoft.com/azure/storage/blobs/versioning-enable#restore-a-previous-version); List
  Blobs with `include=versions` (https://learn.microsoft.com/rest/api/storageservices/list-blobs) lists every
  version with `VersionId` and `IsCurrentVersion`, by name then version. Blob Batch deletes on a versioned
  container are answered here, each sub-request as that Delete Blob, in Azure's multipart/mixed response. Previous
  versions are stored by Azurite in the container `blobgc-versions` (as `<container>/<key>@<version id>`).
  Versioning is an account setting on Azure (the management plane's `isVersioningEnabled`); the stand-in sets it
  per container, `PUT /_blobgc/versioning?bucket=C&enabled=true|false`, so that one emulated account holds both
  kinds. Limits: a versioned listing ignores `delimiter`; deleting the current version by its `versionid` is
  refused (400): Delete Blob without it makes it a previous version first, as blobgc's adapter does; the front
  makes the versioned calls to Azurite itself, signed with the account key (the client's signature is not checked).
- Last-Modified aging (docs/reference.md §1, as scripts/s3_server.py's): `POST /_blobgc/backdate?bucket=C&key=K&
  seconds=N` makes List Blobs, Get Blob and Get Blob Properties report the blob's Last-Modified N seconds earlier
  (cumulative, until the blob is written again: the age is kept with its ETag); 404 when there is no such blob.
Soft delete and Undelete Blob, which Azurite also lacks, are not stood in for: blobgc restores through versions.
Lifecycle management policies are a management-plane setting with no data-plane call: neither Azurite nor this
front has them (ensure_buckets cannot add the 7-day noncurrent-version rule that S3 and GCS buckets get).

Every blob is lost when the server stops (Azurite's state is in memory), and the front's own state (blobgc_front.json
under DIR: ages, versioned containers, current version ids) starts empty at each start too, so the two never
disagree; `make up` creates the stack's containers again.

`ensure_buckets(endpoint, names, versioned)` creates the containers and sets their versioning, with the standard
library only (the stack imports this module).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import email.utils
import fcntl
import hashlib
import hmac
import html
import http.client
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http import server as http_server
from pathlib import Path
from typing import Any

log = logging.getLogger("blobgc.azure_server")

ROOT = Path(__file__).resolve().parent.parent
AZURITE_VERSION = "3.35.0"  # the newest Azurite whose engines allow Node 20 (3.36.0 needs >= 21)
AZURITE_DIR = ROOT / ".blobgc" / "azurite"
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (https://learn.microsoft.com/azure/storage/common/storage-use-azurite)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
API_VERSION = "2021-12-02"
VERSIONS_CONTAINER = "blobgc-versions"
ADMIN = "/_blobgc/"
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te"})
WRITE_COMPS = frozenset({"", "blocklist", "metadata"})  # the writes that make a new version
FORWARDED_DELETE_HEADERS = ("x-ms-lease-id", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since")
BLOB_BLOCK = re.compile(r"<Blob>.*?</Blob>", re.S)
NAME = re.compile(r"<Name(?: [^>]*)?>(.*?)</Name>", re.S)
ETAG = re.compile(r"<Etag>(.*?)</Etag>", re.S)
LAST_MODIFIED = re.compile(r"<Last-Modified>(.*?)</Last-Modified>", re.S)
NEXT_MARKER = re.compile(r"<NextMarker>(.*?)</NextMarker>", re.S)
CHUNK = 1024 * 1024


# ---------------------------------------------------------------- Shared Key, for the front's own calls
def sign(method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str], account: str = ACCOUNT) -> None:
    """Add x-ms-date, x-ms-version and a Shared Key Authorization to `headers`
    (https://learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key); `path` as sent, encoded."""
    headers.setdefault("x-ms-date", email.utils.formatdate(usegmt=True))
    headers.setdefault("x-ms-version", API_VERSION)
    low = {k.lower(): v for k, v in headers.items()}
    length = low.get("content-length", "")
    fields = ["content-encoding", "content-language", "content-md5", "content-type"]
    parts = [method, low.get(fields[0], ""), low.get(fields[1], ""), "" if length == "0" else length]
    parts += [low.get(fields[2], ""), low.get(fields[3], ""), ""]
    parts += [
        low.get(h, "") for h in ("if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range")
    ]
    canonical = "".join(f"{k}:{low[k].strip()}\n" for k in sorted(low) if k.startswith("x-ms-"))
    resource = f"/{account}{path}"
    grouped: dict[str, list[str]] = {}
    for name, value in query:
        grouped.setdefault(name.lower(), []).append(value)
    resource += "".join(f"\n{k}:{','.join(sorted(grouped[k]))}" for k in sorted(grouped))
    to_sign = "\n".join(parts) + "\n" + canonical + resource
    digest = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode("utf-8"), hashlib.sha256).digest()
    headers["Authorization"] = f"SharedKey {account}:{base64.b64encode(digest).decode()}"


def blob_path(container: str, key: str) -> str:
    return f"/{ACCOUNT}/{container}/{urllib.parse.quote(key, safe='/')}"


def shadow_name(container: str, key: str, version: str) -> str:
    return f"{container}/{key}@{version}"


def new_version_id(last: list[datetime]) -> str:
    """A version id as Azure's: the creation time, 7 fractional digits, strictly after the last one given."""
    now = datetime.now(UTC)
    if last and now <= last[0]:
        now = last[0] + timedelta(microseconds=1)
    last[:] = [now]
    return now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"


def version_time(version: str) -> str:
    """The RFC 1123 time of a version id (its creation time)."""
    when = datetime.strptime(version[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
    return email.utils.format_datetime(when, usegmt=True)


def http_date_minus(value: str, seconds: float) -> str:
    when = email.utils.parsedate_to_datetime(value) - timedelta(seconds=seconds)
    return email.utils.format_datetime(when.astimezone(UTC), usegmt=True)


def error_xml(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{html.escape(message)}\n'
        f"RequestId:{uuid.uuid4()}\nTime:{datetime.now(UTC).isoformat()}</Message></Error>"
    ).encode()


class Answer:
    """An HTTP response: status, reason, headers (in order), and a body (bytes, or a stream of chunks)."""

    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes | Iterator[bytes]) -> None:
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def set_header(self, name: str, value: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()] + [(name, value)]

    def data(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        self.body = b"".join(self.body)
        return self.body


def failure(status: int, code: str, message: str) -> Answer:
    body = error_xml(code, message)
    headers = [("x-ms-error-code", code), ("Content-Type", "application/xml"), ("x-ms-request-id", str(uuid.uuid4()))]
    return Answer(status, message, headers, body)


# ---------------------------------------------------------------- state: ages and versions
class State:
    """The front's own state (ages, versioned containers, current version ids): empty at each start, as Azurite's
    in-memory blobs are, and saved as JSON under the data dir only for inspection."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()
        self.last: list[datetime] = []
        data: dict[str, Any] = {}  # Azurite keeps its blobs in memory: its state and this one start empty together
        self.ages: dict[str, list[Any]] = data.get("ages", {})  # "container\nkey" -> [seconds, etag]
        self.versioned: set[str] = set(data.get("versioned", []))
        self.current: dict[str, str] = data.get("current", {})  # "container\nkey" -> version id of the current blob
        self.dirty = threading.Event()

    def save(self) -> None:
        with self.lock:
            data = {"ages": self.ages, "versioned": sorted(self.versioned), "current": self.current}
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)

    def saver(self) -> None:
        """Save the state a moment after it changed (a write per change would slow bulk deletes)."""
        while True:
            self.dirty.wait()
            time.sleep(0.2)
            self.dirty.clear()
            self.save()


# ---------------------------------------------------------------- the front
class Front(http_server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], upstream: tuple[str, int], state: State) -> None:
        super().__init__(address, Handler)
        self.upstream, self.state = upstream, state
        self.local = threading.local()

    def connection(self, fresh: bool = False) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            conn = http.client.HTTPConnection(*self.upstream, timeout=120)
            self.local.conn = conn
        return conn

    def send(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes, *, stream: bool = False
    ) -> Answer:
        """One request to Azurite; `stream` leaves a large body to be read chunk by chunk."""
        for attempt in range(2):
            conn = self.connection(fresh=attempt > 0)
            try:
                conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for name, value in headers:
                    conn.putheader(name, value)
                if not any(k.lower() == "host" for k, _ in headers):
                    conn.putheader("Host", f"{self.upstream[0]}:{self.upstream[1]}")
                if body or method in ("PUT", "POST"):
                    if not any(k.lower() == "content-length" for k, _ in headers):
                        conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                response = conn.getresponse()
                break
            except (ConnectionError, http.client.HTTPException, OSError):
                if attempt:
                    raise
        answer_headers = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_HEADERS]
        if stream and method != "HEAD" and response.getheader("Content-Length"):
            return Answer(response.status, response.reason, answer_headers, read_chunks(response))
        return Answer(response.status, response.reason, answer_headers, response.read())

    def own(
        self, method: str, path: str, query: list[tuple[str, str]] | None = None, headers: dict[str, str] | None = None
    ) -> Answer:
        """A call of the front's own to Azurite, signed with the account key."""
        query = query or []
        sent = dict(headers or {})
        if method in ("PUT", "POST"):
            sent.setdefault("Content-Length", "0")
        sign(method, path, query, sent)
        target = path + ("?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote) if query else "")
        return self.send(method, target, list(sent.items()), b"")

    # versions

    def head(self, container: str, key: str) -> Answer:
        return self.own("HEAD", blob_path(container, key))

    def version_of(self, container: str, key: str, found: Answer) -> str:
        """The current blob's version id (a blob written before versioning gets its Last-Modified as one)."""
        known = self.state.current.get(f"{container}\n{key}")
        if known:
            return known
        when = email.utils.parsedate_to_datetime(found.header("Last-Modified") or "")
        return when.strftime("%Y-%m-%dT%H:%M:%S.0000000Z")

    def keep_previous(self, container: str, key: str) -> str | None:
        """Copy the current blob (if any) into the versions container as a previous version: its version id."""
        found = self.head(container, key)
        if found.status != 200:
            return None
        version = self.version_of(container, key, found)
        source = f"http://{self.upstream[0]}:{self.upstream[1]}{blob_path(container, key)}"
        copied = self.own(
            "PUT", blob_path(VERSIONS_CONTAINER, shadow_name(container, key, version)), [], {"x-ms-copy-source": source}
        )
        if copied.status >= 300:
            raise RuntimeError(f"could not keep {container}/{key} as a previous version: {copied.status}")
        return version

    def drop_previous(self, container: str, key: str, version: str) -> Answer:
        return self.own("DELETE", blob_path(VERSIONS_CONTAINER, shadow_name(container, key, version)))

    def delete_versioned(self, container: str, key: str, version: str | None, headers: dict[str, str]) -> Answer:
        """Delete Blob on a versioned container: the current blob becomes a previous version; with `versionid`, a
        previous version is deleted for good."""
        with self.state.lock:
            ck = f"{container}\n{key}"
            if version:
                if version == self.state.current.get(ck):
                    return failure(400, "InvalidQueryParameterValue", "the stand-in deletes previous versions only")
                done = self.drop_previous(container, key, version)
                if done.status == 404:
                    return failure(404, "BlobNotFound", "The specified blob does not exist.")
                if done.status < 300:
                    done.set_header("x-ms-delete-type-permanent", "true")
                return done
            kept = self.keep_previous(container, key)
            if kept is None:
                return failure(404, "BlobNotFound", "The specified blob does not exist.")
            passed = {k: v for k, v in headers.items() if k.lower() in FORWARDED_DELETE_HEADERS}
            done = self.own("DELETE", blob_path(container, key), [], passed)
            if done.status < 300:
                self.state.current.pop(ck, None)
                self.state.ages.pop(ck, None)
                self.state.dirty.set()
            else:
                self.drop_previous(container, key, kept)
            return done

    def source_rewritten(self, source: str) -> str:
        """A copy source URL naming `versionid=`: the URL of that version where the front keeps it."""
        parts = urllib.parse.urlsplit(source)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        version = next((v for k, v in query if k.lower() == "versionid"), None)
        if not version:
            return source
        segments = urllib.parse.unquote(parts.path).lstrip("/").split("/", 2)
        container, key = segments[1], segments[2]
        rest = [(k, v) for k, v in query if k.lower() != "versionid"]
        if version == self.state.current.get(f"{container}\n{key}"):
            path = blob_path(container, key)
        else:
            path = blob_path(VERSIONS_CONTAINER, shadow_name(container, key, version))
        return urllib.parse.urlunsplit(
            (parts.scheme, f"{self.upstream[0]}:{self.upstream[1]}", path, urllib.parse.urlencode(rest), "")
        )

    def list_all(self, container: str, prefix: str) -> list[tuple[str, str]]:
        """Every blob of `container` under `prefix`: (name, its <Blob> XML block)."""
        found: list[tuple[str, str]] = []
        marker = ""
        while True:
            query = [("restype", "container"), ("comp", "list"), ("prefix", prefix), ("maxresults", "5000")]
            if marker:
                query.append(("marker", marker))
            page = self.own("GET", f"/{ACCOUNT}/{container}", query)
            if page.status == 404:
                return found
            text = page.data().decode("utf-8")
            for block in BLOB_BLOCK.findall(text):
                name = NAME.search(block)
                if name:
                    found.append((html.unescape(name.group(1)), block))
            following = NEXT_MARKER.search(text)
            marker = html.unescape(following.group(1)) if following else ""
            if not marker:
                return found

    def versions_listing(self, container: str, query: dict[str, str]) -> Answer:
        """List Blobs with include=versions on a versioned container: current blobs and previous versions."""
        prefix, limit = query.get("prefix", ""), int(query.get("maxresults", "5000") or 5000)
        entries: list[tuple[str, str, bool, str]] = []
        with self.state.lock:
            for name, block in self.list_all(container, prefix):
                version = self.state.current.get(f"{container}\n{name}")
                entries.append((name, version or "", True, block))
            for name, block in self.list_all(VERSIONS_CONTAINER, f"{container}/{prefix}"):
                key, _, version = name[len(container) + 1 :].rpartition("@")
                block = LAST_MODIFIED.sub(f"<Last-Modified>{version_time(version)}</Last-Modified>", block, count=1)
                entries.append((key, version, False, block))
        entries.sort(key=lambda e: (e[0], e[1]))
        marker = query.get("marker", "")
        if marker:
            after = tuple(base64.urlsafe_b64decode(marker.encode()).decode().split("\n", 1))
            entries = [e for e in entries if (e[0], e[1]) > after]
        page, rest = entries[:limit], entries[limit:]
        blobs = []
        for key, version, current, block in page:
            block = self.aged_block(container, key, block) if current else block
            inner = block[block.index("</Name>") + len("</Name>") :]
            tags = f"<VersionId>{version}</VersionId>" if version else ""
            tags += "<IsCurrentVersion>true</IsCurrentVersion>" if current and version else ""
            blobs.append(f"<Blob><Name>{html.escape(key, quote=False)}</Name>{tags}{inner}")
        next_marker = ""
        if rest:
            next_marker = base64.urlsafe_b64encode(f"{page[-1][0]}\n{page[-1][1]}".encode()).decode()
        body = (
            '<?xml version="1.0" encoding="utf-8"?>'
            f'<EnumerationResults ServiceEndpoint="http://{self.server_address[0]}:{self.server_address[1]}/{ACCOUNT}" '
            f'ContainerName="{html.escape(container)}"><Prefix>{html.escape(prefix)}</Prefix>'
            f"<Marker>{html.escape(marker)}</Marker><MaxResults>{limit}</MaxResults>"
            f"<Blobs>{''.join(blobs)}</Blobs><NextMarker>{next_marker}</NextMarker></EnumerationResults>"
        ).encode()
        headers = [("Content-Type", "application/xml"), ("x-ms-version", API_VERSION), ("x-ms-request-id", "front")]
        return Answer(200, "OK", headers, body)

    # ages

    def aged_block(self, container: str, key: str, block: str) -> str:
        """A listing's <Blob> block with its Last-Modified aged, when the blob was backdated and not written since."""
        age = self.state.ages.get(f"{container}\n{key}")
        etag = ETAG.search(block)
        if not age or not etag or etag.group(1).strip('"') != str(age[1]).strip('"'):
            return block
        found = LAST_MODIFIED.search(block)
        if not found:
            return block
        return LAST_MODIFIED.sub(f"<Last-Modified>{http_date_minus(found.group(1), age[0])}</Last-Modified>", block, 1)

    def aged_listing(self, container: str, answer: Answer) -> None:
        if not self.state.ages:
            return
        text = answer.data().decode("utf-8")

        def one(match: re.Match[str]) -> str:
            name = NAME.search(match.group(0))
            return self.aged_block(container, html.unescape(name.group(1)), match.group(0)) if name else match.group(0)

        answer.body = BLOB_BLOCK.sub(one, text).encode("utf-8")
        answer.set_header("Content-Length", str(len(answer.body)))

    def aged_headers(self, container: str, key: str, answer: Answer) -> None:
        age = self.state.ages.get(f"{container}\n{key}")
        modified = answer.header("Last-Modified")
        if age and modified and (answer.header("ETag") or "").strip('"') == str(age[1]).strip('"'):
            answer.set_header("Last-Modified", http_date_minus(modified, age[0]))

    def backdate(self, container: str, key: str, seconds: float) -> Answer:
        found = self.head(container, key)
        if found.status != 200:
            return failure(404, "BlobNotFound", f"no blob {container}/{key}")
        ck = f"{container}\n{key}"
        etag = (found.header("ETag") or "").strip('"')
        with self.state.lock:
            age = self.state.ages.get(ck)
            total = (float(age[0]) if age and str(age[1]) == etag else 0.0) + seconds
            self.state.ages[ck] = [total, etag]
            self.state.dirty.set()
        modified = http_date_minus(found.header("Last-Modified") or "", total)
        body = json.dumps({"bucket": container, "key": key, "last_modified": modified}).encode()
        return Answer(200, "OK", [("Content-Type", "application/json")], body)


def read_chunks(response: http.client.HTTPResponse) -> Iterator[bytes]:
    while chunk := response.read(CHUNK):
        yield chunk


class Handler(http_server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Front

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug(format, *args)

    def do_GET(self) -> None:
        self.route()

    def do_HEAD(self) -> None:
        self.route()

    def do_PUT(self) -> None:
        self.route()

    def do_POST(self) -> None:
        self.route()

    def do_DELETE(self) -> None:
        self.route()

    def do_OPTIONS(self) -> None:
        self.route()

    def body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if not size:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def route(self) -> None:
        try:
            answer = self.answer()
        except Exception as error:  # the front's own failure: a 500 as the service would give
            log.exception("azure front failed on %s %s", self.command, self.path)
            answer = failure(500, "InternalError", str(error))
        self.reply(answer)

    def reply(self, answer: Answer) -> None:
        self.send_response_only(answer.status, answer.reason)
        streamed = not isinstance(answer.body, bytes)
        for name, value in answer.headers:
            if name.lower() != "content-length" or streamed or self.command == "HEAD":
                self.send_header(name, value)
        if not streamed and self.command != "HEAD":
            self.send_header("Content-Length", str(len(answer.data())))
        self.end_headers()
        if self.command == "HEAD":
            return
        if isinstance(answer.body, bytes):
            self.wfile.write(answer.body)
        else:
            for chunk in answer.body:
                self.wfile.write(chunk)

    def answer(self) -> Answer:
        parts = urllib.parse.urlsplit(self.path)
        pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        query = {k.lower(): v for k, v in pairs}
        body = self.body()
        path = urllib.parse.unquote(parts.path)
        if ADMIN in path:
            return self.admin(path[path.index(ADMIN) + len(ADMIN) :], query)
        segments = path.lstrip("/").split("/", 2)
        container = segments[1] if len(segments) > 1 else ""
        key = segments[2] if len(segments) > 2 else ""
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_HEADERS]
        state = self.server.state
        versioned = container in state.versioned
        comp = query.get("comp", "")
        source = self.headers.get("x-ms-copy-source", "")
        if versioned and key and self.command == "DELETE":
            return self.server.delete_versioned(container, key, query.get("versionid"), dict(self.headers.items()))
        if versioned and self.command == "POST" and comp == "batch":
            return self.batch(container, body)
        if versioned and not key and comp == "list" and "versions" in query.get("include", "").lower().split(","):
            return self.server.versions_listing(container, query)
        if key and self.command in ("GET", "HEAD") and query.get("versionid") and versioned:
            return self.read_version(container, key, query["versionid"])
        if key and self.command == "PUT" and ((versioned and comp in WRITE_COMPS) or "versionid=" in source.lower()):
            return self.write(container, key, versioned, parts, pairs, headers, body)
        answer = self.server.send(self.command, self.path, headers, body, stream=bool(key))
        if key and self.command in ("GET", "HEAD") and answer.status < 300 and not comp:
            self.server.aged_headers(container, key, answer)
            if versioned and (version := state.current.get(f"{container}\n{key}")):
                answer.set_header("x-ms-version-id", version)
                answer.set_header("x-ms-is-current-version", "true")
        elif not key and comp == "list" and answer.status == 200:
            self.server.aged_listing(container, answer)
        return answer

    def admin(self, call: str, query: dict[str, str]) -> Answer:
        if call == "backdate" and self.command == "POST":
            return self.server.backdate(query["bucket"], query["key"], float(query["seconds"]))
        if call == "versioning" and self.command == "PUT":
            state = self.server.state
            with state.lock:
                if query.get("enabled", "true").lower() == "true":
                    state.versioned.add(query["bucket"])
                else:
                    state.versioned.discard(query["bucket"])
                state.save()
            return Answer(200, "OK", [("Content-Type", "application/json")], b"{}")
        return failure(404, "ResourceNotFound", f"no call {call}")

    def write(
        self,
        container: str,
        key: str,
        versioned: bool,
        parts: urllib.parse.SplitResult,
        pairs: list[tuple[str, str]],
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> Answer:
        """A write on a versioned container (the current blob kept as a previous version, a new version id), or a
        copy from a version's URL."""
        server, state = self.server, self.server.state
        with state.lock:
            kept = server.keep_previous(container, key) if versioned else None
            source = self.headers.get("x-ms-copy-source", "")
            if "versionid=" in source.lower():
                sent = {k: v for k, v in headers if k.lower() not in ("authorization", "host", "x-ms-copy-source")}
                sent["x-ms-copy-source"] = server.source_rewritten(source)
                sign("PUT", parts.path, pairs, sent)
                answer = server.send("PUT", self.path, list(sent.items()), body)
            else:
                answer = server.send("PUT", self.path, headers, body)
            if versioned and answer.status < 300:
                version = new_version_id(state.last)
                state.current[f"{container}\n{key}"] = version
                state.dirty.set()
                answer.set_header("x-ms-version-id", version)
            elif kept:
                server.drop_previous(container, key, kept)
        return answer

    def read_version(self, container: str, key: str, version: str) -> Answer:
        """Get Blob or Get Blob Properties of one version."""
        server = self.server
        passed = {k: v for k, v in self.headers.items() if k.lower() in ("range", "x-ms-range", "if-match")}
        if version == server.state.current.get(f"{container}\n{key}"):
            answer = server.own(self.command, blob_path(container, key), [], passed)
            server.aged_headers(container, key, answer)
            answer.set_header("x-ms-is-current-version", "true")
        else:
            answer = server.own(
                self.command, blob_path(VERSIONS_CONTAINER, shadow_name(container, key, version)), [], passed
            )
            if answer.status == 404:
                return failure(404, "BlobNotFound", "The specified blob does not exist.")
            answer.set_header("Last-Modified", version_time(version))
        answer.set_header("x-ms-version-id", version)
        return answer

    def batch(self, container: str, body: bytes) -> Answer:
        """Blob Batch on a versioned container: each Delete Blob sub-request answered as `delete_versioned`."""
        boundary = re.search(r'boundary="?([^";]+)"?', self.headers.get("Content-Type", ""))
        if not boundary:
            return failure(400, "InvalidInput", "a batch request names its multipart boundary")
        requests = []
        for part in body.split(b"--" + boundary.group(1).encode())[1:]:
            if part.startswith(b"--"):
                break
            _, _, request = part.partition(b"\r\n\r\n")
            head = request.split(b"\r\n\r\n", 1)[0].decode("utf-8")
            lines = head.split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            sub_headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
            requests.append((method, target, {k.strip(): v.strip() for k, v in sub_headers.items()}))
        if len(requests) > 256:
            return failure(
                400, "ExceedsMaxBatchRequestCount", "The batch operation exceeds maximum number of requests."
            )
        out_boundary = f"batchresponse_{uuid.uuid4()}"
        payload = b""
        for number, (method, target, sub_headers) in enumerate(requests):
            sub = urllib.parse.urlsplit(target)
            sub_query = {k.lower(): v for k, v in urllib.parse.parse_qsl(sub.query, keep_blank_values=True)}
            names = urllib.parse.unquote(sub.path).lstrip("/").split("/")
            if names and names[0] == ACCOUNT:
                names = names[1:]
            sub_container, key = names[0], "/".join(names[1:])
            if method != "DELETE" or sub_container != container or not key:
                answer = failure(400, "InvalidInput", "the stand-in's batch deletes blobs of this container only")
            else:
                answer = self.server.delete_versioned(container, key, sub_query.get("versionid"), sub_headers)
            data = answer.data()
            lines = [f"HTTP/1.1 {answer.status} {answer.reason}"]
            lines += [f"{k}: {v}" for k, v in answer.headers if k.lower() not in ("content-length", "date", "server")]
            lines.append(f"Content-Length: {len(data)}")
            head = f"--{out_boundary}\r\nContent-Type: application/http\r\nContent-ID: {number}\r\n\r\n"
            payload += (head + "\r\n".join(lines) + "\r\n\r\n").encode() + data + (b"\r\n" if data else b"")
        payload += f"--{out_boundary}--\r\n".encode()
        headers = [
            ("Content-Type", f"multipart/mixed; boundary={out_boundary}"),
            ("x-ms-request-id", str(uuid.uuid4())),
            ("x-ms-version", API_VERSION),
        ]
        return Answer(202, "Accepted", headers, payload)


# ---------------------------------------------------------------- Azurite
def azurite_bin() -> Path:
    """Azurite's blob service command, installed into .blobgc/azurite when absent (npm, once, under a lock)."""
    command = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
    if command.exists():
        return command
    AZURITE_DIR.mkdir(parents=True, exist_ok=True)
    with open(AZURITE_DIR.parent / "azurite.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not command.exists():
            log.warning("installing Azurite %s into %s (npm)", AZURITE_VERSION, AZURITE_DIR)
            subprocess.run(
                [
                    "npm",
                    "install",
                    "--prefix",
                    str(AZURITE_DIR),
                    f"azurite@{AZURITE_VERSION}",
                    "--no-audit",
                    "--no-fund",
                ],
                check=True,
                stdout=sys.stderr,
            )
    return command


def die_with_parent() -> None:
    """Ask Linux to end Azurite when this server ends (PR_SET_PDEATHSIG), whatever ends it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def start_azurite(host: str, port: int, data: Path) -> subprocess.Popen[bytes]:
    command = azurite_bin()
    data.mkdir(parents=True, exist_ok=True)
    args = [str(command), "--blobHost", host, "--blobPort", str(port), "--inMemoryPersistence"]
    args += ["--loose", "--skipApiVersionCheck", "--silent", "--disableTelemetry"]
    process = subprocess.Popen(args, preexec_fn=die_with_parent)  # noqa: PLW1509 - only sets the death signal
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"Azurite exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return process
        time.sleep(0.2)
    process.terminate()
    raise SystemExit(f"Azurite did not listen on {host}:{port} within 60 s")


def serve(host: str, port: int, data: Path, azurite_port: int) -> None:
    data.mkdir(parents=True, exist_ok=True)
    azurite = start_azurite("127.0.0.1", azurite_port, data)

    def stop(*_: Any) -> None:
        azurite.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            azurite.wait(10)
        state.save()
        os._exit(0)

    state = State(data / "blobgc_front.json")
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    front = Front((host, port), ("127.0.0.1", azurite_port), state)
    created = front.own("PUT", f"/{ACCOUNT}/{VERSIONS_CONTAINER}", [("restype", "container")])
    if created.status not in (201, 409):
        raise SystemExit(f"could not create the versions container: {created.status} {created.data()[:200]!r}")
    threading.Thread(target=state.saver, daemon=True).start()
    log.warning(
        "Azure Blob Storage (Azurite %s + blobgc front) on http://%s:%d/%s", AZURITE_VERSION, host, port, ACCOUNT
    )
    try:
        front.serve_forever()
    finally:
        stop()


# ---------------------------------------------------------------- the stack's containers
def ensure_buckets(endpoint: str, names: list[str], versioned: bool) -> None:
    """Create the containers that do not exist (`endpoint` is the account's, e.g. http://127.0.0.1:59200/
    devstoreaccount1) and set each one's versioning in the front; no lifecycle rule (see the module docstring)."""
    parts = urllib.parse.urlsplit(endpoint)
    account = parts.path.strip("/") or ACCOUNT
    root = f"{parts.scheme}://{parts.netloc}"
    for name in names:
        path = f"/{account}/{name}"
        headers = {"Content-Length": "0", "Content-Type": "application/octet-stream"}  # urllib would add its own
        sign("PUT", path, [("restype", "container")], headers, account)
        request = urllib.request.Request(f"{root}{path}?restype=container", method="PUT", headers=headers, data=b"")
        try:
            urllib.request.urlopen(request, timeout=30).close()
        except urllib.error.HTTPError as error:
            if error.code != 409:  # ContainerAlreadyExists
                raise
        query = urllib.parse.urlencode({"bucket": name, "enabled": "true" if versioned else "false"})
        urllib.request.urlopen(
            urllib.request.Request(f"{root}{ADMIN}versioning?{query}", method="PUT", data=b""), timeout=30
        ).close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=59200)
    parser.add_argument("--azurite-port", type=int, default=None, help="Azurite's own port (default: port + 1)")
    parser.add_argument("--data", required=True, help="directory of the server's state")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serve(args.host, args.port, Path(args.data).resolve(), args.azurite_port or args.port + 1)


if __name__ == "__main__":
    main()
