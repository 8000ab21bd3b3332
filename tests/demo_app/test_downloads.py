"""demo_app.downloads: the crawler's downloader refuses private addresses and bad URLs."""
from __future__ import annotations

import pytest

from demo_app.downloads import DownloadFailed, DownloadPolicy, address_refusal, check_url, parse_networks


REFUSED = {
    # IPv4
    "127.0.0.1": "loopback", "127.255.0.9": "loopback",
    "169.254.169.254": "link-local",  # the cloud metadata service
    "10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private",
    "224.0.0.1": "multicast", "239.255.255.250": "multicast",
    "0.0.0.0": "unspecified",
    "240.0.0.1": "private",  # reserved for future use; Python files it under private
    "255.255.255.255": "private",
    "100.64.0.1": "non-global",  # shared address space (carrier-grade NAT)
    # IPv6
    "::1": "loopback", "::": "unspecified",
    "fe80::1": "link-local", "fe80::1%lo": "link-local",
    "fc00::1": "private", "fd12:3456::1": "private",
    "ff02::1": "multicast",
    "::ffff:127.0.0.1": "loopback", "::ffff:169.254.169.254": "link-local", "::ffff:10.0.0.1": "private",
    "2002:7f00:1::": "loopback",  # 6to4 around 127.0.0.1
    "2002:a9fe:a9fe::": "link-local",  # 6to4 around 169.254.169.254
    "64:ff9b::a9fe:a9fe": "reserved",  # NAT64 around 169.254.169.254
    "::127.0.0.1": "reserved",  # IPv4-compatible (deprecated)
}


ALLOWED = ["8.8.8.8", "93.184.216.34", "1.1.1.1", "2001:4860:4860::8888", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address,category", sorted(REFUSED.items()))
def test_crawler_refuses_private_addresses_by_category(address, category):
    reason = address_refusal(address)
    assert reason is not None and f"({category}" in reason, reason


@pytest.mark.parametrize("address", ALLOWED)
def test_crawler_refuses_private_addresses_but_not_public_ones(address):
    assert address_refusal(address) is None


def test_crawler_refuses_private_addresses_unless_the_allow_list_opens_them():
    loopback = parse_networks(["127.0.0.0/8"])
    assert address_refusal("127.0.0.1", loopback) is None
    assert address_refusal("::ffff:127.0.0.1", loopback) is None  # the same address, IPv4-mapped
    assert address_refusal("2002:7f00:1::", loopback) is None  # 6to4 to an allowed address
    assert "loopback" in address_refusal("::1", loopback)  # an IPv4 network does not open IPv6 loopback
    assert "link-local" in address_refusal("169.254.169.254", loopback)
    assert address_refusal("::1", parse_networks(["::1/128"])) is None
    assert address_refusal("10.9.8.7", parse_networks(["10.9.8.0/24"])) is None
    assert "private" in address_refusal("10.9.9.7", parse_networks(["10.9.8.0/24"]))
    # opening NAT64 does not open what it leads to
    assert "link-local" in address_refusal("64:ff9b::a9fe:a9fe", parse_networks(["64:ff9b::/96"]))


def test_crawler_refuses_private_addresses_allow_list_must_be_cidrs():
    assert DownloadPolicy(allowed_networks=["127.0.0.1/8"]).allowed_networks == parse_networks(["127.0.0.0/8"])
    with pytest.raises(ValueError, match="not a CIDR"):
        DownloadPolicy(allowed_networks=["localhost"])


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/a.jpg", "gopher://127.0.0.1:70/",
                                 "data:,x", "javascript:alert(1)", "//example.com/a.jpg"])
def test_crawler_refuses_schemes_other_than_http_and_https(url):
    with pytest.raises(DownloadFailed) as refused:
        check_url(url, parse_networks(["0.0.0.0/0", "::/0"]))  # whatever the allow-list
    assert refused.value.kind == "refused_scheme"


@pytest.mark.parametrize("url", ["http://127.0.0.1/a.jpg", "http://localhost:8080/a.jpg", "https://[::1]/a.jpg",
                                 "http://169.254.169.254/latest/meta-data/", "http://2130706433/a.jpg",
                                 "http://0x7f.1/a.jpg", "http://[::ffff:127.0.0.1]/a.jpg", "HTTP://10.0.0.1/a.jpg"])
def test_crawler_refuses_private_addresses_after_resolution(url):
    """Every address the host resolves to is checked, so decimal, hex and mapped spellings are caught too."""
    with pytest.raises(DownloadFailed) as refused:
        check_url(url)
    assert refused.value.kind == "refused_address"


def test_crawler_refuses_private_addresses_if_any_resolved_address_is(monkeypatch):
    import demo_app.downloads

    monkeypatch.setattr(demo_app.downloads, "resolve_addresses", lambda host, port: ["93.184.216.34", "10.0.0.5"])
    with pytest.raises(DownloadFailed, match="10.0.0.5"):
        check_url("https://partner.example/a.jpg")
    monkeypatch.setattr(demo_app.downloads, "resolve_addresses", lambda host, port: ["93.184.216.34"])
    check_url("https://partner.example/a.jpg")  # public only: allowed


def test_crawler_refuses_private_addresses_malformed_urls_are_invalid():
    for url in ("http://example.com:notaport/a.jpg", "http:///a.jpg"):
        with pytest.raises(DownloadFailed) as refused:
            check_url(url)
        assert refused.value.kind == "invalid_url", url


def test_downloads_retry_a_failed_name_resolution_then_record_it(monkeypatch):
    import socket

    import requests

    import demo_app.downloads
    from demo_app.downloads import download

    looked_up: list[str] = []

    def unresolvable(host: str, port: int) -> list[str]:
        looked_up.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(demo_app.downloads, "resolve_addresses", unresolvable)
    with requests.Session() as session, pytest.raises(DownloadFailed) as failed:
        download(session, "https://partner.example/a.jpg", DownloadPolicy(attempts=3), sleep=lambda _: None)
    assert failed.value.kind == "connection" and looked_up == ["partner.example"] * 3
