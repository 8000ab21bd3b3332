"""The crawler DAG's durable work list: requests staged as per-URL items in batches, with their outcomes.

A run stages its (offer, URL) items once, in `blobgc.crawl_item`, cut into batches that keep every
URL hash in one batch (so no two batches of a run fetch the same URL). The mapped tasks get batch
numbers, never URL lists, and each records its items' outcomes; a retried batch only does what is
left. Requests come from the run's conf or, without conf, from the application's pending
`app.crawl_request` rows.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import psycopg

from blobgc import queries
from blobgc.images import CrawlItem, CrawlOutcome, CrawlOutcomes, md5_hex

log = logging.getLogger(__name__)

MAX_URLS_PER_REQUEST = 100


class MalformedRequests(ValueError):
    """The conf's `requests` is not a list of {"offer_id": int, "urls": [http(s) URL, ...]}."""


@dataclass(frozen=True)
class CrawlRequest:
    offer_id: int
    urls: tuple[str, ...]
    request_id: int | None = None


def parse_requests(value: object) -> list[CrawlRequest]:
    """Validate the conf's `requests`; raise MalformedRequests naming the first problem."""
    if not isinstance(value, list):
        raise MalformedRequests('"requests" must be a list of {"offer_id": int, "urls": [str, ...]}')
    parsed = []
    for n, entry in enumerate(value):
        where = f"requests[{n}]"
        if not isinstance(entry, dict) or set(entry) - {"offer_id", "urls"}:
            raise MalformedRequests(f'{where} must be an object with "offer_id" and "urls" only')
        offer_id, urls = entry.get("offer_id"), entry.get("urls")
        if not isinstance(offer_id, int) or isinstance(offer_id, bool) or offer_id <= 0:
            raise MalformedRequests(f"{where}.offer_id must be a positive integer, got {offer_id!r}")
        if not isinstance(urls, list) or not urls or len(urls) > MAX_URLS_PER_REQUEST:
            raise MalformedRequests(f"{where}.urls must be a list of 1 to {MAX_URLS_PER_REQUEST} URLs")
        for url in urls:
            if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
                raise MalformedRequests(f"{where}.urls has {url!r}, which is not an http(s) URL")
        parsed.append(CrawlRequest(offer_id, tuple(urls)))
    return parsed


def claim_pending_requests(conn: psycopg.Connection, run_id: str, limit: int = 1000) -> list[CrawlRequest]:
    with conn.transaction():
        rows = conn.execute(queries.load("crawler/claim_pending_requests"), {"run_id": run_id, "limit": limit})
        return [CrawlRequest(offer_id, tuple(urls), request_id) for request_id, offer_id, urls in rows]


def stage_items(conn: psycopg.Connection, run_id: str, requests: Iterable[CrawlRequest], urls_per_batch: int) -> list[int]:
    """Stage the run's items once (a retry finds them) and return the batches with work left.

    An offer's URLs are numbered from 1 in order (`num`); a URL repeated for one offer counts once.
    Items of an offer that does not exist are recorded as failed straight away.
    """
    with conn.transaction():
        if conn.execute(queries.load("crawler/count_staged_items"), {"run_id": run_id}).fetchone()[0] == 0:
            requests = list(requests)
            existing = {r[0] for r in conn.execute(queries.load("crawler/select_existing_offers"),
                                                  {"ids": sorted({r.offer_id for r in requests})})}
            items: list[tuple] = []
            seen: set[tuple[int, str]] = set()
            for request in requests:
                for num, url in enumerate(request.urls, start=1):
                    url_hash = md5_hex(url)
                    if (request.offer_id, url_hash) in seen:
                        continue
                    seen.add((request.offer_id, url_hash))
                    missing = request.offer_id not in existing
                    items.append((request.request_id, request.offer_id, url, url_hash, min(num, 32767),
                                  "failed" if missing else None,
                                  f"offer {request.offer_id} does not exist" if missing else None))
            # batches of about urls_per_batch items; all the items of one URL hash in the same batch
            items.sort(key=lambda item: item[3])
            batch_nos, batch, size, previous = [], 0, 0, None
            for item in items:
                if size >= urls_per_batch and item[3] != previous:
                    batch, size = batch + 1, 0
                batch_nos.append(batch)
                size += 1
                previous = item[3]
            columns = list(zip(*items, strict=True)) if items else [[]] * 7
            conn.execute(queries.load("crawler/insert_crawl_items"), {
                "run_id": run_id, "item_nos": list(range(len(items))), "batch_nos": batch_nos,
                "request_ids": list(columns[0]), "offer_ids": list(columns[1]), "urls": list(columns[2]),
                "url_hashes": list(columns[3]), "nums": list(columns[4]), "outcomes": list(columns[5]),
                "errors": list(columns[6]),
            })
            log.info("staged %d URLs of %d requests in %d batches", len(items), len(requests),
                     (batch + 1) if items else 0)
        return [r[0] for r in conn.execute(queries.load("crawler/select_staged_batches"), {"run_id": run_id})]


def batch_items(conn: psycopg.Connection, run_id: str, batch_no: int) -> list[CrawlItem]:
    rows = conn.execute(queries.load("crawler/select_batch_items"), {"run_id": run_id, "batch_no": batch_no})
    return [CrawlItem(item_no, offer_id, url, num) for item_no, offer_id, url, num in rows]


def record_outcomes(conn: psycopg.Connection, run_id: str, outcomes: dict[int, CrawlOutcome]) -> None:
    nos = sorted(outcomes)
    with conn.transaction():
        conn.execute(queries.load("crawler/record_crawl_outcomes"), {
            "run_id": run_id, "item_nos": nos, "outcomes": [outcomes[n].outcome for n in nos],
            "image_ids": [outcomes[n].image_id for n in nos], "errors": [outcomes[n].error for n in nos],
        })


def finish_crawl(conn: psycopg.Connection, run_id: str) -> dict[str, object]:
    """Mark the run's claimed requests done and return its items per outcome, with sample failures."""
    with conn.transaction():
        conn.execute(queries.load("crawler/finish_crawl_requests"), {"run_id": run_id})
        rows = conn.execute(queries.load("crawler/summarize_crawl_run"), {"run_id": run_id}).fetchall()
    summary: dict[str, object] = {outcome: n for outcome, n, _ in rows}
    failures = [f for outcome, _, sample in rows if outcome == "failed" for f in (sample or [])]
    if failures:
        summary["sample_failures"] = failures
    return summary


def outcome_counts(outcomes: CrawlOutcomes) -> dict[str, int]:
    """A batch's items per outcome, plus `retries` (transactions retried after a deadlock), for XCom."""
    counts = dict(Counter(o.outcome for o in outcomes.values()))
    counts["retries"] = outcomes.retries
    return counts
