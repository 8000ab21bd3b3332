"""Bounded, address-checked downloads of partner photos: streamed, with timeouts, a size cap and retries on 5xx and
timeouts.

**Why every address is checked.** A partner URL is untrusted input: `http://169.254.169.254/` (cloud
metadata), `http://localhost:6379/` or a private host would otherwise be fetched from inside our
network (SSRF). So a download only goes to http(s) URLs whose host resolves to public addresses
alone. Loopback, link-local, private, multicast, unspecified, reserved and other non-global
addresses are refused unless `DownloadPolicy.allowed_networks` (Variable
`blobgc_crawler_allowed_networks`) lists them. The check is made three times over:

- on every address the host name resolves to, before connecting;
- on every redirect hop (redirects are followed here, at most `max_redirects`, never by requests);
- on the peer address of the socket actually connected (`GuardedAdapter`), so a name that resolves
  to a public address for the check and to a private one for the connection (DNS rebinding) is
  refused too.

A refusal raises `DownloadFailed` with kind `refused_scheme` or `refused_address`; it is never retried.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from requests.utils import requote_uri
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from blobgc.core.uploads import Rejected

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
CHUNK = 64 * 1024
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known NAT64 prefix: the last 32 bits are an IPv4 address

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class DownloadFailed(Rejected):
    """A URL that cannot be used; `kind` is http_<status>, timeout, connection, invalid_url, oversize,
    too_many_redirects, refused_scheme, refused_address or refused_proxy."""


def parse_networks(networks: Iterable[str | IPNetwork]) -> tuple[IPNetwork, ...]:
    """CIDRs as networks (host bits allowed, as in `10.1.2.3/24`); raises ValueError naming a bad one."""
    if isinstance(networks, str):  # one CIDR passed where a list was meant
        networks = [networks]
    parsed = []
    for network in networks:
        try:
            parsed.append(ipaddress.ip_network(network, strict=False))
        except ValueError as error:
            raise ValueError(f"allowed network {network!r} is not a CIDR: {error}") from error
    return tuple(parsed)


@dataclass(frozen=True)
class DownloadPolicy:
    """Timeouts, size cap, retries, redirects, and the networks opened despite not being public.

    `allowed_networks` takes CIDR strings (or networks) and keeps them as a tuple of networks; an
    invalid CIDR raises ValueError here, at construction.
    """

    connect_timeout: float = 5.0
    read_timeout: float = 20.0
    max_bytes: int = DEFAULT_MAX_BYTES
    attempts: int = 3
    backoff: float = 0.5  # seconds, doubled per retry
    max_redirects: int = 5
    allowed_networks: tuple[IPNetwork, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_networks", parse_networks(self.allowed_networks))


DEFAULT_POLICY = DownloadPolicy()


# ---------------------------------------------------------------------------------------------- addresses
def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for or routes to: IPv4-mapped, 6to4 and NAT64 forms."""
    if address.version != 6:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_category(address: IPAddress) -> str | None:
    """Why this address is not a public one (loopback, link-local, ...), or None for a global unicast address."""
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:  # e.g. 100.64.0.0/10, shared address space (carrier-grade NAT)
        return "non-global"
    return None


def address_refusal(address: str | IPAddress, allowed_networks: Iterable[IPNetwork] = ()) -> str | None:
    """Why the crawler must not connect to `address` (e.g. "127.0.0.1 (loopback)"), or None when it may.

    An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) is judged as the IPv4 address it is; a 6to4 or
    NAT64 address is refused when either it or the IPv4 address it routes to is not public. An
    address inside `allowed_networks` is allowed whatever it is.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    networks = tuple(allowed_networks)

    def allowed(candidate: IPAddress) -> bool:
        return any(candidate.version == n.version and candidate in n for n in networks)

    for candidate in (ip, embedded_ipv4(ip)):
        if candidate is None or allowed(candidate):
            continue
        category = address_category(candidate)
        if category is not None:
            return f"{ip} ({category})" if candidate is ip else f"{ip} ({category}: it leads to {candidate})"
    return None


def resolve_addresses(host: str, port: int) -> list[str]:
    """Every address `host` resolves to for a TCP connection (an IP literal resolves to itself)."""
    return sorted({info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})


def check_url(url: str, allowed_networks: Iterable[IPNetwork] = ()) -> None:
    """Raise DownloadFailed unless `url` is http(s) and every address its host resolves to may be fetched."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES:
            raise DownloadFailed(
                "refused_scheme", f"{url}: scheme {scheme or '(none)'!r} is refused; only http and https are fetched"
            )
        host = parts.hostname
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError as error:  # a port that is not a number, a malformed IPv6 literal
        raise DownloadFailed("invalid_url", f"{url}: {error}") from error
    if not host:
        raise DownloadFailed("invalid_url", f"{url}: no host")
    try:
        addresses = resolve_addresses(host, port)
    except UnicodeError as error:  # a host name IDNA cannot encode
        raise DownloadFailed("invalid_url", f"{url}: host {host!r}: {error}") from error
    except OSError as error:  # may pass: `download` retries it
        raise DownloadFailed("connection", f"{url}: cannot resolve {host}: {error}") from error
    networks = tuple(allowed_networks)
    for address in addresses:
        reason = address_refusal(address, networks)
        if reason:
            raise DownloadFailed(
                "refused_address",
                f"{url}: {host} resolves to {reason}; refused, as it is not "
                "in Variable blobgc_crawler_allowed_networks",
            )


# ---------------------------------------------------------------------------------------------- connections
class _PeerCheckedConnection:
    """Mixin for urllib3 connections: refuse the socket when its peer address may not be fetched.

    This is the check that DNS rebinding cannot get past: it looks at the address actually connected,
    whatever the resolver answered when `check_url` asked.
    """

    allowed_networks: tuple[IPNetwork, ...] = ()

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()  # type: ignore[misc]
        peer = sock.getpeername()[0]
        reason = address_refusal(peer, self.allowed_networks)
        if reason:
            sock.close()
            host = getattr(self, "host", "?")
            raise DownloadFailed(
                "refused_address",
                f"connected to {host} at {reason}; refused, as it is not in Variable blobgc_crawler_allowed_networks",
            )
        return sock


def guarded_pool_classes(allowed_networks: tuple[IPNetwork, ...]) -> dict[str, type[HTTPConnectionPool]]:
    """urllib3 pool classes for http and https whose connections check their peer address."""
    attrs = {"allowed_networks": allowed_networks}
    http_conn = type("PeerCheckedHTTPConnection", (_PeerCheckedConnection, HTTPConnection), attrs)
    https_conn = type("PeerCheckedHTTPSConnection", (_PeerCheckedConnection, HTTPSConnection), attrs)
    return {
        "http": type("PeerCheckedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": http_conn}),
        "https": type("PeerCheckedHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": https_conn}),
    }


class GuardedAdapter(HTTPAdapter):
    """A requests adapter whose every connection checks its peer address; it never goes through a proxy
    (the address to check would be the proxy's)."""

    def __init__(self, allowed_networks: Iterable[str | IPNetwork] = (), **kwargs) -> None:
        self.allowed_networks = parse_networks(allowed_networks)
        super().__init__(**kwargs)

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = guarded_pool_classes(self.allowed_networks)

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        raise DownloadFailed("refused_proxy", f"the crawler connects directly, never through a proxy ({proxy})")


def guard_session(session: requests.Session, policy: DownloadPolicy) -> None:
    """Make every connection of `session` check its peer address against `policy` (idempotent).

    Replaces the session's adapters with one `GuardedAdapter` for http:// and https://, and stops it
    taking proxies from the environment.
    """
    current = session.adapters
    if set(current) == {"http://", "https://"} and all(
        isinstance(a, GuardedAdapter) and a.allowed_networks == policy.allowed_networks for a in current.values()
    ):
        return
    adapter = GuardedAdapter(policy.allowed_networks)
    current.clear()
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    session.trust_env = False
    session.proxies.clear()


# ---------------------------------------------------------------------------------------------- download
def download(
    session: requests.Session,
    url: str,
    policy: DownloadPolicy = DEFAULT_POLICY,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """The body of `url`, streamed and capped; retried with backoff on 5xx, timeouts and dropped connections.

    Redirects are followed here, each hop checked like the first URL (`check_url`); the session's
    connections check their peer address too (`guard_session`). Refusals are never retried.
    """
    guard_session(session, policy)
    for attempt in range(policy.attempts):
        last = attempt == policy.attempts - 1
        try:
            return fetch_following_redirects(session, url, policy, last_attempt=last)
        except _Retry as reason:
            retry_reason = str(reason)
        except DownloadFailed as error:
            if error.kind != "connection" or last:  # refusals and bad answers are final; a DNS failure may pass
                raise
            retry_reason = str(error)
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
        delay = policy.backoff * 2**attempt
        log.info("download of %s failed (%s); retry %d in %.1fs", url, retry_reason, attempt + 1, delay)
        sleep(delay)
    raise AssertionError("unreachable")


def fetch_following_redirects(
    session: requests.Session, url: str, policy: DownloadPolicy, *, last_attempt: bool
) -> bytes:
    """One attempt at `url`: follow at most `policy.max_redirects` redirects, checking the scheme and
    every address of each hop before connecting; raise `_Retry` on a 5xx unless this is the last attempt."""
    current = url
    for hop in range(policy.max_redirects + 1):
        try:
            check_url(current, policy.allowed_networks)
        except DownloadFailed as refused:
            if hop:
                raise DownloadFailed(refused.kind, f"{url} redirects (hop {hop}) to {refused}") from refused
            raise
        with session.get(
            current, stream=True, timeout=(policy.connect_timeout, policy.read_timeout), allow_redirects=False
        ) as response:
            target = session.get_redirect_target(response)
            if target is not None:
                current = requote_uri(urljoin(current, target))
                continue
            if response.status_code >= 500 and not last_attempt:
                raise _Retry(f"HTTP {response.status_code}")
            if response.status_code != 200:
                raise DownloadFailed(f"http_{response.status_code}", f"HTTP {response.status_code} for {current}")
            declared = response.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > policy.max_bytes:
                raise DownloadFailed(
                    "oversize", f"{current} declares {int(declared):,} bytes, over the cap of {policy.max_bytes:,}"
                )
            body = bytearray()
            for chunk in response.iter_content(CHUNK):
                body += chunk
                if len(body) > policy.max_bytes:
                    raise DownloadFailed("oversize", f"{current} sent more than the cap of {policy.max_bytes:,} bytes")
            return bytes(body)
    raise DownloadFailed("too_many_redirects", f"{url}: more than {policy.max_redirects} redirects")


class _Retry(Exception):
    pass


@contextmanager
def fetching(
    policy: DownloadPolicy = DEFAULT_POLICY, *, user_agent: str = "blobgc-crawler/1.0"
) -> Iterator[Callable[[str], bytes]]:
    """A `fetch(url) -> bytes` for the crawler, on one HTTP session for the block (`download` under `policy`)."""
    with requests.Session() as session:
        session.headers["User-Agent"] = user_agent
        yield lambda url: download(session, url, policy)
