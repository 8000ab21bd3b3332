"""Bounded downloads of partner photos: streamed, with timeouts, a size cap and retries on 5xx and timeouts."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import requests

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
CHUNK = 64 * 1024


class DownloadFailed(RuntimeError):
    """A URL that cannot be used; `kind` is http_404 (any status), timeout, connection, oversize or not_an_image."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class DownloadPolicy:
    connect_timeout: float = 5.0
    read_timeout: float = 20.0
    max_bytes: int = DEFAULT_MAX_BYTES
    attempts: int = 3
    backoff: float = 0.5  # seconds, doubled per retry


DEFAULT_POLICY = DownloadPolicy()


def download(
    session: requests.Session,
    url: str,
    policy: DownloadPolicy = DEFAULT_POLICY,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """The body of `url`, streamed and capped; retried with backoff on 5xx, timeouts and dropped connections."""
    for attempt in range(policy.attempts):
        last = attempt == policy.attempts - 1
        try:
            with session.get(url, stream=True, timeout=(policy.connect_timeout, policy.read_timeout),
                             allow_redirects=True) as response:
                if response.status_code >= 500 and not last:
                    raise _Retry(f"HTTP {response.status_code}")
                if response.status_code != 200:
                    raise DownloadFailed(f"http_{response.status_code}", f"HTTP {response.status_code} for {url}")
                declared = response.headers.get("Content-Length")
                if declared and declared.isdigit() and int(declared) > policy.max_bytes:
                    raise DownloadFailed("oversize", f"{url} declares {int(declared):,} bytes, over the cap of "
                                                     f"{policy.max_bytes:,}")
                body = bytearray()
                for chunk in response.iter_content(CHUNK):
                    body += chunk
                    if len(body) > policy.max_bytes:
                        raise DownloadFailed("oversize", f"{url} sent more than the cap of {policy.max_bytes:,} bytes")
                return bytes(body)
        except _Retry as reason:
            retry_reason = str(reason)
        except (requests.Timeout, requests.exceptions.ChunkedEncodingError) as error:
            if last:
                raise DownloadFailed("timeout", f"{url} timed out: {error}") from error
            retry_reason = f"timeout ({type(error).__name__})"
        except requests.ConnectionError as error:
            # requests reports a read timeout in the middle of the body as a ConnectionError
            kind = "timeout" if "timed out" in str(error).lower() else "connection"
            if last:
                raise DownloadFailed(kind, f"{url}: {kind}: {error}") from error
            retry_reason = kind
        except requests.RequestException as error:
            raise DownloadFailed("invalid_url", f"{url}: {error}") from error
        delay = policy.backoff * 2 ** attempt
        log.info("download of %s failed (%s); retry %d in %.1fs", url, retry_reason, attempt + 1, delay)
        sleep(delay)
    raise AssertionError("unreachable")


class _Retry(Exception):
    pass
