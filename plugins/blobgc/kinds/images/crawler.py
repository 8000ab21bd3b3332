"""Seed 001's crawler: partner photos fetched for offers through a URL-hash cache, each URL downloaded once.

**The work list.** A run stages its (offer, URL) items once, in `blobgc.crawl_item`, cut into
batches that keep every URL hash in one batch (so no two batches of a run fetch the same URL). The
mapped tasks get batch numbers, never URL lists, and each records its items' outcomes; a retried
batch only does what is left. Requests come from the run's conf or, without conf, from the
application's pending `app.crawl_request` rows.

**The seed's three branches**, by `url_hash` (the md5 of the URL): a URL not seen within the cache
window is fetched and stored once, with a new row (`new`); a URL bound to another offer gets a new
row with the same `image_id` and no download (`linked`); an unbound row is bound again (`rebound`).

The application owns the bytes: the DAG hands `crawl` a `fetch(url) -> bytes` (the downloader, which
refuses private addresses) and a `store(conn, body, insert_rows) -> image_id` (crop-resize-split
and upload, owed first: `blobgc.core.uploads`). A URL either refuses (`blobgc.core.uploads.Rejected`)
is recorded as failed with its reason, never raised. Writers that reuse an image id hold its stripe
shared (`blobgc.core.locks`), so the cleaner never deletes files under a new row.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from typing import TypeVar
from urllib.parse import urlsplit

import psycopg

from blobgc.core import queries
from blobgc.core.locks import IMAGE_LOCK_CLASS, URL_LOCK_CLASS, lock_stripes, session_stripe
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef
from blobgc.core.settings import ConfigurationError
from blobgc.core.uploads import Rejected
from blobgc.kinds.images.rows import insert_image_rows

log = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 5  # tries of one crawler transaction that PostgreSQL failed as a deadlock victim
CONFLICT_BACKOFF = 0.05  # seconds; before retry n, a random sleep of up to CONFLICT_BACKOFF * 2**n (full jitter)
CONFLICTS = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)

T = TypeVar("T")
# the application's side of a new photo: its bytes, and storing them (crop-resize-split-upload) with its rows
Fetch = Callable[[str], bytes]
Store = Callable[[psycopg.Connection, bytes, Callable[[psycopg.Connection, str], object]], str]


def md5_hex(data: bytes | str) -> str:
    return hashlib.md5(data.encode() if isinstance(data, str) else data, usedforsecurity=False).hexdigest()


# ------------------------------------------------------------------------------------------- crawling
@dataclass(frozen=True)
class CrawlItem:
    """One (offer, URL) to crawl, with its place (`num`) in the offer."""

    item_no: int
    offer_id: int
    url: str
    num: int

    @property
    def url_hash(self) -> str:
        return md5_hex(self.url)


@dataclass
class CrawlOutcome:
    outcome: str  # new | linked | rebound | unchanged | failed
    image_id: str | None = None
    error: str | None = None


def apply_cached(
    conn: psycopg.Connection, items: list[CrawlItem], seen_since: datetime
) -> tuple[dict[int, CrawlOutcome], list[CrawlItem]]:
    """The seed's branches 2 and 3 (and re-runs) for every item whose URL was seen since `seen_since`.

    One lookup for all the items, then batched writes, in one transaction. Returns the outcomes and
    the items that need a download (branch 1): URLs not seen within the window, or whose rows
    vanished in the meantime.
    """
    outcomes: dict[int, CrawlOutcome] = {}
    with conn.transaction():
        lock_stripes(conn, URL_LOCK_CLASS, [i.url_hash for i in items], exclusive=False)
        rows = conn.execute(
            queries.load("images/select_cached_images", "blobgc.kinds.images"),
            {"url_hashes": sorted({i.url_hash for i in items})},
        ).fetchall()
        offers = {i.offer_id for i in items}
        state: dict[str, list[list]] = {}
        for row_id, image_id, offer_id, url_hash, body_hash, last_update in rows:
            # the cache window: a URL seen since `seen_since` is not fetched again; an offer's own row counts always
            if last_update >= seen_since or offer_id in offers:
                state.setdefault(url_hash, []).append([row_id, image_id, offer_id, body_hash])
        binds: list[tuple[CrawlItem, int, bool]] = []
        inserts: list[tuple[CrawlItem, str, str | None]] = []
        misses: list[CrawlItem] = []
        for item in items:
            known = state.get(item.url_hash)
            if not known:
                misses.append(item)
                continue
            own = [r for r in known if r[2] == item.offer_id]
            elsewhere = [r for r in known if r[2] is not None and r[2] != item.offer_id]
            unbound = [r for r in known if r[2] is None]
            if not own and not elsewhere and not unbound:  # only other offers' rows, seen too long ago
                misses.append(item)
                continue
            if own:  # already bound to this offer (a re-run): keep it, with the requested order
                binds.append((item, own[0][0], False))
                outcomes[item.item_no] = CrawlOutcome("unchanged", own[0][1])
            elif elsewhere:  # branch 2: bound to another offer -> a new row with the same image_id
                inserts.append((item, elsewhere[0][1], elsewhere[0][3]))
                known.append([None, elsewhere[0][1], item.offer_id, elsewhere[0][3]])
                outcomes[item.item_no] = CrawlOutcome("linked", elsewhere[0][1])
            else:  # branch 3: an unbound row -> bind it, with num and last_update
                unbound[0][2] = item.offer_id
                binds.append((item, unbound[0][0], True))
                outcomes[item.item_no] = CrawlOutcome("rebound", unbound[0][1])
        if binds:
            changed = {
                r[0]
                for r in conn.execute(
                    queries.load("images/update_image_bindings", "blobgc.kinds.images"),
                    {
                        "ids": [b[1] for b in binds],
                        "offer_ids": [b[0].offer_id for b in binds],
                        "nums": [b[0].num for b in binds],
                        "rebind": [b[2] for b in binds],
                    },
                )
            }
            for item, row_id, _ in binds:
                if row_id not in changed:  # rebound or deleted by someone else meanwhile: start over
                    outcomes.pop(item.item_no, None)
                    misses.append(item)
        if inserts:
            lock_stripes(conn, IMAGE_LOCK_CLASS, [image_id for _, image_id, _ in inserts], exclusive=False)
            done = insert_image_rows(
                conn,
                [
                    (image_id, item.offer_id, item.url_hash, body_hash, item.num)
                    for item, image_id, body_hash in inserts
                ],
                require_existing=True,
            )
            done_keys = Counter((image_id, offer_id) for _, image_id, offer_id in done)
            for item, image_id, _ in inserts:
                if done_keys[(image_id, item.offer_id)]:
                    done_keys[(image_id, item.offer_id)] -= 1
                else:  # the image was cleaned up meanwhile: download it again
                    outcomes.pop(item.item_no, None)
                    misses.append(item)
    return outcomes, misses


def drop_items_of_deleted_offers(
    conn: psycopg.Connection, items: list[CrawlItem], outcomes: dict[int, CrawlOutcome]
) -> list[CrawlItem]:
    """The items whose offer still exists; the others are recorded as failed."""
    existing = {
        r[0]
        for r in conn.execute(
            queries.load("crawler/select_existing_offers", "blobgc.kinds.images"),
            {"ids": sorted({i.offer_id for i in items})},
        )
    }
    for item in items:
        if item.offer_id not in existing:
            outcomes[item.item_no] = CrawlOutcome("failed", error=f"offer_gone: offer {item.offer_id} does not exist")
    return [i for i in items if i.offer_id in existing]


def retry_on_conflict(
    conn: psycopg.Connection,
    work: Callable[[], T],
    *,
    what: str,
    attempts: int = CONFLICT_ATTEMPTS,
    backoff: float = CONFLICT_BACKOFF,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """Run `work` (its own transactions), again when PostgreSQL fails it as a deadlock victim or a
    serialization failure; return its result and how many retries it took.

    At most `attempts` tries, with full-jitter backoff (a random sleep of up to `backoff * 2**n`)
    so that the two sides of a deadlock do not meet again in step. The last failure is raised. A
    connection already inside a transaction cannot retry (that transaction is lost): `work` runs once.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return work(), 0
    for attempt in range(attempts):
        try:
            return work(), attempt
        except CONFLICTS as error:
            if attempt == attempts - 1:
                log.error("%s: %s, %d times; giving up", what, type(error).__name__, attempts)
                raise
            delay = random.uniform(0, backoff * 2**attempt)
            log.warning(
                "%s: %s (%s); retry %d of %d in %.3fs",
                what,
                type(error).__name__,
                str(error).splitlines()[0],
                attempt + 1,
                attempts - 1,
                delay,
            )
            sleep(delay)
    raise AssertionError("unreachable")


class CrawlOutcomes(dict[int, CrawlOutcome]):
    """The outcome of each crawled item by item number, and how many database transactions were retried
    after a deadlock or serialization failure (`retries`)."""

    retries: int = 0


def crawl(
    conn: psycopg.Connection,
    items: list[CrawlItem],
    *,
    fetch: Fetch,
    store: Store,
    seen_since: datetime,
) -> CrawlOutcomes:
    """Crawl `items` following the seed's three branches; bad URLs are recorded as failed, never raised.

    Cached URLs are handled in one batch (`apply_cached`). Each remaining URL is fetched once, under
    its URL-hash stripe (so a concurrent run waits rather than fetching it too), and `store` writes
    its files with its first row; further offers in the batch get rows with the same image id. The
    cached batch and each URL group are units of work that are retried whole when PostgreSQL picks
    them as a deadlock victim (`retry_on_conflict`); a URL's body is fetched once however often its
    group is retried. A URL that `fetch` or `store` refuses (`Rejected`) is recorded as failed with
    its reason.
    """
    outcomes = CrawlOutcomes()
    items = drop_items_of_deleted_offers(conn, items, outcomes)

    def cached_batch() -> tuple[dict[int, CrawlOutcome], list[CrawlItem]]:
        nonlocal items
        try:
            return apply_cached(conn, items, seen_since)
        except psycopg.errors.ForeignKeyViolation:  # an offer was deleted since: once more without it
            items = drop_items_of_deleted_offers(conn, items, outcomes)
            return apply_cached(conn, items, seen_since)

    (cached, misses), retries = retry_on_conflict(conn, cached_batch, what=f"crawl of {len(items)} URLs (cached)")
    outcomes.retries += retries
    outcomes.update(cached)
    misses.sort(key=lambda i: (i.url_hash, i.item_no))
    for _, group_iter in groupby(misses, key=lambda i: i.url_hash):
        group = list(group_iter)
        bodies: dict[str, bytes] = {}  # the URL's body, downloaded once however often its group is retried
        done, retries = retry_on_conflict(
            conn,
            functools.partial(
                crawl_url_group, conn, group, fetch=fetch, store=store, seen_since=seen_since, bodies=bodies
            ),
            what=f"crawl of {group[0].url}",
        )
        outcomes.retries += retries
        outcomes.update(done)
    counts = Counter(o.outcome for o in outcomes.values())
    log.info(
        "crawled %d URLs: %s; %d transactions retried after a deadlock", len(items), dict(counts), outcomes.retries
    )
    return outcomes


def crawl_url_group(
    conn: psycopg.Connection,
    group: list[CrawlItem],
    *,
    fetch: Fetch,
    store: Store,
    seen_since: datetime,
    bodies: dict[str, bytes],
) -> dict[int, CrawlOutcome]:
    """The items of one URL not found in the cache: fetch it once (kept in `bodies`), store it, and insert a
    row per item, all under the URL-hash stripe held alone; return the items' outcomes."""
    outcomes: dict[int, CrawlOutcome] = {}
    url_hash = group[0].url_hash
    with session_stripe(conn, URL_LOCK_CLASS, url_hash, exclusive=True):
        cached, remaining = apply_cached(conn, group, seen_since)  # another run may have just fetched it
        outcomes.update(cached)
        if not remaining:
            return outcomes
        try:
            if url_hash not in bodies:
                bodies[url_hash] = fetch(remaining[0].url)
            body = bodies[url_hash]
            body_hash = md5_hex(body)
            image_id = store(
                conn,
                body,
                lambda c, new_id: insert_image_rows(
                    c, [(new_id, i.offer_id, i.url_hash, body_hash, i.num) for i in remaining], require_existing=False
                ),
            )
        except Rejected as error:
            log.warning("%s: %s (%s)", remaining[0].url, error.kind, error)
            for item in remaining:
                outcomes[item.item_no] = CrawlOutcome("failed", error=f"{error.kind}: {error}")
            return outcomes
        except psycopg.errors.ForeignKeyViolation:
            # an offer was deleted while its photo was fetched: the files stay owed (the upload
            # intent) and the cleaner deletes them; the URL is recorded as failed for every offer
            for item in remaining:
                outcomes[item.item_no] = CrawlOutcome(
                    "failed", error="offer_gone: an offer was deleted while its photo was fetched"
                )
            return outcomes
    outcomes[remaining[0].item_no] = CrawlOutcome("new", image_id)
    for item in remaining[1:]:
        outcomes[item.item_no] = CrawlOutcome("linked", image_id)
    return outcomes


# ------------------------------------------------------------------------------------------ work list
MAX_URLS_PER_REQUEST = 100


class MalformedRequests(ConfigurationError):
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
        rows = conn.execute(
            queries.load("crawler/claim_pending_requests", "blobgc.kinds.images"), {"run_id": run_id, "limit": limit}
        )
        return [CrawlRequest(offer_id, tuple(urls), request_id) for request_id, offer_id, urls in rows]


def stage_items(
    conn: psycopg.Connection, run_id: str, requests: Iterable[CrawlRequest], urls_per_batch: int
) -> list[int]:
    """Stage the run's items once (a retry finds them) and return the batches with work left.

    An offer's URLs are numbered from 1 in order (`num`); a URL repeated for one offer counts once.
    Items of an offer that does not exist are recorded as failed straight away.
    """
    with conn.transaction():
        (staged,) = queries.one_row(
            conn.execute(queries.load("crawler/count_staged_items", "blobgc.kinds.images"), {"run_id": run_id})
        )
        if staged == 0:
            requests = list(requests)
            existing = {
                r[0]
                for r in conn.execute(
                    queries.load("crawler/select_existing_offers", "blobgc.kinds.images"),
                    {"ids": sorted({r.offer_id for r in requests})},
                )
            }
            items: list[tuple] = []
            seen: set[tuple[int, str]] = set()
            for request in requests:
                for num, url in enumerate(request.urls, start=1):
                    url_hash = md5_hex(url)
                    if (request.offer_id, url_hash) in seen:
                        continue
                    seen.add((request.offer_id, url_hash))
                    missing = request.offer_id not in existing
                    items.append(
                        (
                            request.request_id,
                            request.offer_id,
                            url,
                            url_hash,
                            min(num, 32767),
                            "failed" if missing else None,
                            f"offer {request.offer_id} does not exist" if missing else None,
                        )
                    )
            # batches of about urls_per_batch items; all the items of one URL hash in the same batch
            items.sort(key=lambda item: item[3])
            batch_nos, batch, size, previous = [], 0, 0, None
            for item in items:
                if size >= urls_per_batch and item[3] != previous:
                    batch, size = batch + 1, 0
                batch_nos.append(batch)
                size += 1
                previous = item[3]
            columns = list(zip(*items, strict=True)) if items else [()] * 7
            conn.execute(
                queries.load("crawler/insert_crawl_items", "blobgc.kinds.images"),
                {
                    "run_id": run_id,
                    "item_nos": list(range(len(items))),
                    "batch_nos": batch_nos,
                    "request_ids": list(columns[0]),
                    "offer_ids": list(columns[1]),
                    "urls": list(columns[2]),
                    "url_hashes": list(columns[3]),
                    "nums": list(columns[4]),
                    "outcomes": list(columns[5]),
                    "errors": list(columns[6]),
                },
            )
            log.info(
                "staged %d URLs of %d requests in %d batches", len(items), len(requests), (batch + 1) if items else 0
            )
        return [
            r[0]
            for r in conn.execute(
                queries.load("crawler/select_staged_batches", "blobgc.kinds.images"), {"run_id": run_id}
            )
        ]


def batch_items(conn: psycopg.Connection, run_id: str, batch_no: int) -> list[CrawlItem]:
    rows = conn.execute(
        queries.load("crawler/select_batch_items", "blobgc.kinds.images"), {"run_id": run_id, "batch_no": batch_no}
    )
    return [CrawlItem(item_no, offer_id, url, num) for item_no, offer_id, url, num in rows]


def record_outcomes(conn: psycopg.Connection, run_id: str, outcomes: dict[int, CrawlOutcome]) -> None:
    nos = sorted(outcomes)
    with conn.transaction():
        conn.execute(
            queries.load("crawler/record_crawl_outcomes", "blobgc.kinds.images"),
            {
                "run_id": run_id,
                "item_nos": nos,
                "outcomes": [outcomes[n].outcome for n in nos],
                "image_ids": [outcomes[n].image_id for n in nos],
                "errors": [outcomes[n].error for n in nos],
            },
        )


def finish_crawl(conn: psycopg.Connection, run: RunRef) -> dict[str, object]:
    """Mark the run's claimed requests done and return its items per outcome, with sample failures."""
    with conn.transaction():
        conn.execute(queries.load("crawler/finish_crawl_requests", "blobgc.kinds.images"), {"run_id": run.run_id})
        rows = conn.execute(
            queries.load("crawler/summarize_crawl_run", "blobgc.kinds.images"), {"run_id": run.run_id}
        ).fetchall()
    summary: dict[str, object] = {outcome: n for outcome, n, _ in rows}
    failures = [f for outcome, _, sample in rows if outcome == "failed" for f in (sample or [])]
    if failures:
        summary["sample_failures"] = failures
    return summary


@dataclass
class CrawlBatchResult(TaskResult):
    """A batch's items per outcome, and the transactions retried after a deadlock or serialization failure."""

    new: int = 0
    linked: int = 0
    rebound: int = 0
    unchanged: int = 0
    failed: int = 0
    retries: int = 0

    @classmethod
    def of(cls, outcomes: CrawlOutcomes) -> CrawlBatchResult:
        return cls(**Counter(o.outcome for o in outcomes.values()), retries=outcomes.retries)


def outcome_counts(outcomes: CrawlOutcomes) -> dict[str, int]:
    """A batch's items per outcome (those it had), plus `retries`."""
    counts = dict(Counter(o.outcome for o in outcomes.values()))
    counts["retries"] = outcomes.retries
    return counts
