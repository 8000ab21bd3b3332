"""blobgc.kinds.images.crawler: seed 001's three branches, the URL cache window, bad URLs and private addresses."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import psycopg
import pytest

import demo_app.downloads
from blobgc.kinds.images.crawler import (
    CONFLICT_ATTEMPTS, CONFLICT_BACKOFF, CrawlItem, CrawlRequest, batch_items, md5_hex, outcome_counts,
    record_outcomes, retry_on_conflict, stage_items,
)
from blobgc.core.clients import pg_connect
from blobgc.kinds.images.layouts import IMAGE_FILES, image_keys
from blobgc.core.locks import URL_LOCK_CLASS, lock_stripes
from demo_app.downloads import DownloadPolicy
from tests.helpers import object_keys, wait_until
from tests.photo_server import jpeg
from tests.support.images import FAST, SIZES, age_rows, image_rows, run_crawl


STRICT = DownloadPolicy(connect_timeout=2, read_timeout=0.5, max_bytes=1024 * 1024, attempts=1)  # no allow-list


def backend_waits_on_a_lock(watcher, pid: int) -> bool:
    return watcher.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                           (pid,)).fetchone()[0] is True


def crawl_one(conn, s3, settings, url: str, policy: DownloadPolicy):
    return run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)], policy=policy)[0]


def assert_refused(conn, s3, settings, outcome, kind: str) -> None:
    assert outcome.outcome == "failed" and outcome.error.startswith(f"{kind}: "), outcome
    assert image_rows(conn) == [] and object_keys(s3, settings.bucket) == set()
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0


def idle_connection(status=psycopg.pq.TransactionStatus.IDLE):
    return SimpleNamespace(info=SimpleNamespace(transaction_status=status))


def failing(times: int, error: type[Exception]):
    calls = {"n": 0}

    def work():
        calls["n"] += 1
        if calls["n"] <= times:
            raise error("deadlock detected")
        return "done"

    return work, calls


def test_branch_1_new_url_is_downloaded_cut_uploaded_and_bound(conn, s3, settings, photos, offers):
    url = photos.url("/photo/1.jpg")
    outcomes = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])
    assert outcomes[0].outcome == "new"
    image_id = outcomes[0].image_id
    assert image_rows(conn) == [(image_id, 1, 1)]
    row = conn.execute("SELECT url_hash, body_hash FROM app.image").fetchone()
    assert row == (md5_hex(url), md5_hex(jpeg(1)))
    assert object_keys(s3, settings.bucket) == set(image_keys(image_id, SIZES))
    assert photos.hits["/photo/1.jpg"] == 1
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0  # the upload intent is gone


def test_branch_2_url_bound_to_another_offer_gets_a_row_with_the_same_image_id_and_no_download(
        conn, s3, settings, photos, offers):
    url = photos.url("/photo/2.jpg")
    first = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])[0]
    second = run_crawl(conn, s3, settings, [CrawlItem(0, 2, url, 3)])[0]
    assert (second.outcome, second.image_id) == ("linked", first.image_id)
    assert image_rows(conn) == [(first.image_id, 1, 1), (first.image_id, 2, 3)]
    assert photos.hits["/photo/2.jpg"] == 1
    assert len(object_keys(s3, settings.bucket)) == len(SIZES)


def test_branch_3_unbound_row_is_rebound_with_num_and_last_update(conn, s3, settings, photos, offers):
    url = photos.url("/photo/3.jpg")
    first = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])[0]
    with conn.transaction():
        conn.execute("DELETE FROM app.offer WHERE id = 1")  # ON DELETE SET NULL unbinds the photo
        conn.execute("UPDATE app.image SET last_update = now() - interval '2 days'")
    again = run_crawl(conn, s3, settings, [CrawlItem(0, 2, url, 4)])[0]
    assert (again.outcome, again.image_id) == ("rebound", first.image_id)
    assert image_rows(conn) == [(first.image_id, 2, 4)]
    touched = conn.execute("SELECT last_update > now() - interval '1 minute' FROM app.image").fetchone()[0]
    assert touched and photos.hits["/photo/3.jpg"] == 1


def test_a_second_crawl_of_the_same_urls_downloads_nothing_and_adds_no_rows(conn, s3, settings, photos, offers):
    items = [CrawlItem(i, 1 + i % 2, photos.url(f"/photo/{10 + i}.jpg"), i + 1) for i in range(4)]
    run_crawl(conn, s3, settings, items)
    rows, hits = image_rows(conn), sum(photos.hits.values())
    outcomes = run_crawl(conn, s3, settings, items)
    assert {o.outcome for o in outcomes.values()} == {"unchanged"}
    assert image_rows(conn) == rows
    assert sum(photos.hits.values()) == hits == 4


def test_cache_window_a_url_seen_long_ago_is_downloaded_again(conn, s3, settings, photos, offers):
    url = photos.url("/photo/4.jpg")
    first = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])[0]
    age_rows(conn, 30)
    later = run_crawl(conn, s3, settings, [CrawlItem(0, 2, url, 1)], cache_days=14)[0]
    assert later.outcome == "new" and later.image_id != first.image_id
    assert photos.hits["/photo/4.jpg"] == 2
    # within the window, whether or not it was used, it is not fetched again
    run_crawl(conn, s3, settings, [CrawlItem(0, 3, url, 1)], cache_days=14)
    assert photos.hits["/photo/4.jpg"] == 2


def test_same_url_for_several_offers_in_one_batch_is_downloaded_once(conn, s3, settings, photos, offers):
    url = photos.url("/photo/5.jpg")
    outcomes = run_crawl(conn, s3, settings, [CrawlItem(i, i + 1, url, 1) for i in range(3)])
    assert sorted(o.outcome for o in outcomes.values()) == ["linked", "linked", "new"]
    assert len({o.image_id for o in outcomes.values()}) == 1
    assert photos.hits["/photo/5.jpg"] == 1


def test_every_kind_of_bad_url_is_recorded_and_leaves_nothing_behind(conn, s3, settings, photos, offers):
    bad = {"/missing.jpg": "http_404", "/slow.jpg": "timeout", "/text.jpg": "not_an_image",
           "/bomb.png": "bomb", "/huge.jpg": "oversize", "/huge-stream.jpg": "oversize", "/error.jpg": "http_500"}
    items = [CrawlItem(i, 1, photos.url(path), i + 1) for i, path in enumerate(bad)]
    items.append(CrawlItem(len(items), 1, photos.url("/photo/6.jpg"), 99))
    outcomes = run_crawl(conn, s3, settings, items)
    for item, (path, kind) in zip(items, bad.items(), strict=False):
        assert outcomes[item.item_no].outcome == "failed", path
        assert outcomes[item.item_no].error.startswith(kind), (path, outcomes[item.item_no].error)
    good = outcomes[items[-1].item_no]
    assert good.outcome == "new"
    assert image_rows(conn) == [(good.image_id, 1, 99)]  # no row for a bad URL
    assert object_keys(s3, settings.bucket) == set(image_keys(good.image_id, SIZES))  # no file either
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0
    assert photos.hits["/error.jpg"] == 3  # 5xx is retried (3 attempts), 404 is not
    assert photos.hits["/missing.jpg"] == 1


def test_a_url_for_an_offer_deleted_before_the_crawl_is_recorded_as_failed(conn, s3, settings, photos, offers):
    with conn.transaction():
        conn.execute("DELETE FROM app.offer WHERE id = 5")
    outcomes = run_crawl(conn, s3, settings, [CrawlItem(0, 5, photos.url("/photo/8.jpg"), 1),
                                              CrawlItem(1, 4, photos.url("/photo/8.jpg"), 1)])
    assert outcomes[0].outcome == "failed" and outcomes[0].error.startswith("offer_gone")
    assert outcomes[1].outcome == "new"
    assert image_rows(conn) == [(outcomes[1].image_id, 4, 1)]


def test_a_flaky_server_is_retried_with_backoff(conn, s3, settings, photos, offers):
    outcome = run_crawl(conn, s3, settings, [CrawlItem(0, 1, photos.url("/flaky.jpg"), 1)])[0]
    assert outcome.outcome == "new" and photos.hits["/flaky.jpg"] == 3


def test_crawler_deadlock_with_the_drain_guard_is_retried_and_the_item_linked(
        conn, other_conn, test_dsn, s3, settings, photos, offers):
    """Issue 15 #15: a real deadlock. The drain guard holds the image id's stripe alone; the crawler (branch 2)
    holds the URL stripe shared and waits for the image stripe; the guard's side then asks for the URL stripe
    alone. PostgreSQL fails the crawler (the lower deadlock_timeout), which retries and links the item."""
    url = photos.url("/photo/90.jpg")
    image_id = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])[0].image_id  # bound to offer 1
    stage_items(conn, "deadlock", [CrawlRequest(2, (url,))], 50)
    items = batch_items(conn, "deadlock", 0)
    crawler = pg_connect(test_dsn)
    crawler.execute("SET deadlock_timeout = '500ms'")  # the crawler checks first: it is the victim
    other_conn.execute("SET deadlock_timeout = '30s'")
    pool = ThreadPoolExecutor(1)
    try:
        with pg_connect(test_dsn) as watcher, other_conn.transaction():
            with IMAGE_FILES.hold(other_conn, None, settings.bucket, image_keys(image_id, SIZES)) as verdict:
                assert verdict.keep == set(image_keys(image_id, SIZES))  # the guard keeps them: the image id has a row
                assert verdict.stay_owed == {}
                crawling = pool.submit(run_crawl, crawler, s3, settings, items)
                wait_until(lambda: backend_waits_on_a_lock(watcher, crawler.info.backend_pid))
                # the cycle: returns once PostgreSQL has failed the crawler's transaction (its URL stripe is free)
                lock_stripes(other_conn, URL_LOCK_CLASS, [md5_hex(url)], exclusive=True)
        outcomes = crawling.result(60)
    finally:
        pool.shutdown(wait=True)
        crawler.close()
    assert (outcomes[items[0].item_no].outcome, outcomes[items[0].item_no].image_id) == ("linked", image_id)
    assert outcomes.retries == 1 and outcome_counts(outcomes) == {"linked": 1, "retries": 1}
    record_outcomes(conn, "deadlock", outcomes)
    assert conn.execute("SELECT outcome, image_id FROM blobgc.crawl_item WHERE run_id = 'deadlock'").fetchall() == [
        ("linked", image_id)]
    assert image_rows(conn) == [(image_id, 1, 1), (image_id, 2, 1)]
    assert photos.hits["/photo/90.jpg"] == 1


def test_crawler_refuses_private_addresses_without_the_allow_list(conn, s3, settings, photos, offers):
    port = photos.httpd.server_address[1]
    for url in (photos.url("/photo/91.jpg"), f"http://localhost:{port}/photo/91.jpg",  # a name for loopback
                f"http://[::1]:{port}/photo/91.jpg", "http://169.254.169.254/latest/meta-data/",
                "http://10.0.0.1/photo.jpg", "http://0.0.0.0/photo.jpg", "http://2130706433/photo.jpg"):
        outcome = crawl_one(conn, s3, settings, url, STRICT)
        assert_refused(conn, s3, settings, outcome, "refused_address")
        assert "blobgc_crawler_allowed_networks" in outcome.error
    assert photos.hits["/photo/91.jpg"] == 0  # refused before connecting


def test_crawler_refuses_private_addresses_outside_the_allow_list_that_opens_others(conn, s3, settings, photos, offers):
    only_10 = DownloadPolicy(attempts=1, allowed_networks=["10.0.0.0/8"])
    assert_refused(conn, s3, settings, crawl_one(conn, s3, settings, photos.url("/photo/92.jpg"), only_10),
                   "refused_address")
    assert photos.hits["/photo/92.jpg"] == 0


def test_crawler_allows_private_addresses_in_the_allow_list(conn, s3, settings, photos, offers):
    port = photos.httpd.server_address[1]
    first = crawl_one(conn, s3, settings, photos.url("/photo/93.jpg"), FAST)
    by_name = run_crawl(conn, s3, settings, [CrawlItem(0, 2, f"http://localhost:{port}/photo/94.jpg", 1)],
                        policy=DownloadPolicy(attempts=1, allowed_networks=["127.0.0.0/8", "::1/128"]))[0]
    assert (first.outcome, by_name.outcome) == ("new", "new")
    assert photos.hits["/photo/93.jpg"] == photos.hits["/photo/94.jpg"] == 1


def test_crawler_refuses_private_addresses_on_a_redirect_hop(conn, s3, settings, photos, offers):
    """Redirects are followed one hop at a time, each hop's scheme and addresses checked before connecting."""
    port = photos.httpd.server_address[1]
    just_the_server = DownloadPolicy(attempts=1, allowed_networks=["127.0.0.1/32"])
    refusals = {
        photos.redirect_url("http://169.254.169.254/latest/meta-data/iam/"): "refused_address",
        photos.redirect_url(f"http://127.0.0.2:{port}/photo/95.jpg"): "refused_address",  # loopback, not allowed
        photos.redirect_url(f"http://[::1]:{port}/photo/95.jpg"): "refused_address",
        photos.redirect_url("file:///etc/passwd"): "refused_scheme",
        photos.redirect_url("gopher://127.0.0.1:6379/_FLUSHALL"): "refused_scheme",
        photos.url("/redirect-loop"): "too_many_redirects",
    }
    for url, kind in refusals.items():
        outcome = crawl_one(conn, s3, settings, url, just_the_server)
        assert_refused(conn, s3, settings, outcome, kind)
        if kind.startswith("refused"):
            assert "redirects (hop 1)" in outcome.error, outcome.error
    assert photos.hits["/redirect-loop"] == 6  # the first request and 5 redirects, then it gives up
    assert photos.hits["/photo/95.jpg"] == 0
    followed = crawl_one(conn, s3, settings, photos.redirect_url(photos.url("/photo/96.jpg")), just_the_server)
    assert followed.outcome == "new" and photos.hits["/photo/96.jpg"] == 1


def test_crawler_refuses_schemes_other_than_http_and_https(conn, s3, settings, offers):
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/photo.jpg", "gopher://127.0.0.1:70/", "data:,hello"):
        assert_refused(conn, s3, settings, crawl_one(conn, s3, settings, url, FAST), "refused_scheme")


def test_crawler_refuses_private_addresses_after_dns_rebinding(conn, s3, settings, photos, offers, monkeypatch):
    """A name that resolves to a public address for the check and to loopback for the connection is refused
    at the connected socket's peer address."""
    monkeypatch.setattr(demo_app.downloads, "resolve_addresses", lambda host, port: ["93.184.216.34"], raising=False)
    outcome = crawl_one(conn, s3, settings, photos.url("/photo/97.jpg"), STRICT)
    assert_refused(conn, s3, settings, outcome, "refused_address")
    assert "connected to 127.0.0.1" in outcome.error
    assert photos.hits["/photo/97.jpg"] == 0  # the socket was closed before any request was sent


@pytest.mark.parametrize("error", [psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure])
def test_crawler_deadlock_is_retried_and_the_retries_counted(error):
    work, calls = failing(2, error)
    slept: list[float] = []
    assert retry_on_conflict(idle_connection(), work, what="test", sleep=slept.append) == ("done", 2)
    assert calls["n"] == 3 and len(slept) == 2
    for n, delay in enumerate(slept):  # full jitter: anywhere from 0 up to backoff * 2**n
        assert 0 <= delay <= CONFLICT_BACKOFF * 2 ** n


def test_crawler_deadlock_retries_are_bounded():
    work, calls = failing(100, psycopg.errors.DeadlockDetected)
    slept: list[float] = []
    with pytest.raises(psycopg.errors.DeadlockDetected):
        retry_on_conflict(idle_connection(), work, what="test", sleep=slept.append)
    assert CONFLICT_ATTEMPTS == 5 and calls["n"] == CONFLICT_ATTEMPTS and len(slept) == CONFLICT_ATTEMPTS - 1


def test_crawler_deadlock_jitter_differs_between_retries():
    delays = set()
    for _ in range(20):
        work, _calls = failing(1, psycopg.errors.DeadlockDetected)
        slept: list[float] = []
        retry_on_conflict(idle_connection(), work, what="test", backoff=1.0, sleep=slept.append)
        delays.add(slept[0])
    assert len(delays) > 1


def test_crawler_deadlock_other_errors_and_open_transactions_are_not_retried():
    work, calls = failing(1, psycopg.errors.UniqueViolation)
    with pytest.raises(psycopg.errors.UniqueViolation):
        retry_on_conflict(idle_connection(), work, what="test", sleep=lambda _: None)
    assert calls["n"] == 1
    work, calls = failing(1, psycopg.errors.DeadlockDetected)  # inside a caller's transaction: that one is lost
    with pytest.raises(psycopg.errors.DeadlockDetected):
        retry_on_conflict(idle_connection(psycopg.pq.TransactionStatus.INTRANS), work, what="test",
                          sleep=lambda _: None)
    assert calls["n"] == 1
