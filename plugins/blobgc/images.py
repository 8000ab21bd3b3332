"""Seed 001: photos stored once, bound to offers by rows that may repeat, and the rotten-photo cleaner.

`app.image` rows may share an `image_id` (the files `images/{id[:2]}/{id}/{size}.jpg`); a row with
no offer is a photo kept for later, removed by the cleaner after the grace. The files of an
image id go only when no row with that id is left.

**Why files are never deleted under a row.** Rows are the references, and several code paths
add a row for an existing `image_id` (crawler branch 2, pre-upload reuse, attach) without
uploading anything. Those writers hold a *shared* advisory lock on the image id's stripe while
they check that a row with the id still exists and insert theirs. The outbox guard
(`hold_unreferenced_images`) holds the same stripes *alone* while it checks that no row is left
and deletes the files. Either the writer comes first (the guard sees its row and keeps the
files), or the guard does (the writer finds no row, and processes the photo anew).

**Why the crawler retries a transaction.** The drain guard holds image-id stripes alone while
writers take URL-hash and image-id stripes shared; PostgreSQL may break the resulting lock cycle by
failing one side with `DeadlockDetected` (or a `SerializationFailure`). The crawler retries its unit
of work (the cached batch, or one URL group) a bounded number of times with jittered backoff, and
counts the retries (`CrawlOutcomes.retries`), instead of losing the item.

**Why an upload never leaves orphans.** A new image's keys are owed (an intent in the outbox)
before its files are uploaded; the row insert and the removal of the intent are one
transaction. A crash in between leaves the keys owed, and the cleaner's drain deletes them. The
uploader holds its stripe (shared) until the row is in, so no drain deletes files mid-upload.
"""
from __future__ import annotations

import hashlib
import logging
import random
import re
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby
from typing import TypeVar

import psycopg

from blobgc import queries
from blobgc.downloads import DEFAULT_MAX_BYTES, DEFAULT_POLICY, DownloadFailed, DownloadPolicy, download
from blobgc.image_processing import DEFAULT_MAX_PIXELS, DEFAULT_SIZES, EXT, ImageRejected, Watermark, render_sizes
from blobgc.objects import delete_objects_in_batches
from blobgc.outbox import IMAGE_SOURCE, record_deletions, replace_dry_run_log
from blobgc.runs import RunRef, add_counts, set_counts
from blobgc.sizes import human_bytes

log = logging.getLogger(__name__)

SOURCE = IMAGE_SOURCE
CLEANUP_DAG = "blobgc_image_cleanup"  # owes (and drains) every image file deletion, upload intents included
IMAGE_LOCK_CLASS = 0x62676331  # advisory lock classes ("bgc1", "bgc2"): image-id stripes, URL-hash stripes
URL_LOCK_CLASS = 0x62676332
STRIPES = 1024
SAMPLE = 10
IMAGE_ID = re.compile(r"[0-9a-f]{32}")
IMAGE_FILE = re.compile(r"[A-Za-z0-9_]+\.[a-z0-9]+")
CONFLICT_ATTEMPTS = 5  # tries of one crawler transaction that PostgreSQL failed as a deadlock victim
CONFLICT_BACKOFF = 0.05  # seconds; before retry n, a random sleep of up to CONFLICT_BACKOFF * 2**n (full jitter)
CONFLICTS = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)

T = TypeVar("T")


def new_image_id() -> str:
    return uuid.uuid4().hex


def md5_hex(data: bytes | str) -> str:
    return hashlib.md5(data.encode() if isinstance(data, str) else data, usedforsecurity=False).hexdigest()


def image_keys(image_id: str, sizes: Iterable[str]) -> list[str]:
    """`images/{image_id[0:2]}/{image_id}/{size}.jpg` for every size name."""
    return [f"images/{image_id[:2]}/{image_id}/{name}.{EXT}" for name in sizes]


def image_id_of(key: str) -> str | None:
    """The image id of `images/{id[0:2]}/{id}/{size}.{ext}`, or None for a key of any other layout."""
    parts = key.split("/")
    if (len(parts) == 4 and parts[0] == "images" and IMAGE_ID.fullmatch(parts[2]) and parts[1] == parts[2][:2]
            and IMAGE_FILE.fullmatch(parts[3])):
        return parts[2]
    return None


def stripe(value: str) -> int:
    return zlib.crc32(value.encode()) % STRIPES


def lock_stripes(conn: psycopg.Connection, lock_class: int, values: Iterable[str], *, exclusive: bool) -> None:
    """Hold the stripes of `values` until the transaction ends (in stripe order, so lockers never deadlock)."""
    stripes = sorted({stripe(v) for v in values})
    if stripes:
        conn.execute(queries.load("images/lock_image_stripes"),
                     {"lock_class": lock_class, "stripes": stripes, "exclusive": exclusive}).fetchall()


@contextmanager
def session_stripe(conn: psycopg.Connection, lock_class: int, value: str, *, exclusive: bool) -> Iterator[None]:
    """Hold one stripe across transactions (a download, an upload), released however the block ends."""
    params = {"lock_class": lock_class, "stripe": stripe(value), "exclusive": exclusive}
    conn.execute(queries.load("images/lock_stripe_for_session"), params).fetchall()
    try:
        yield
    finally:
        if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            conn.execute(queries.load("images/unlock_stripe_for_session"), params).fetchall()


@contextmanager
def hold_unreferenced_images(conn: psycopg.Connection, keys: list[str]) -> Iterator[set[str]]:
    """The outbox's guard for image files: yield the keys whose image id has a row again, hold the others.

    Takes the image ids' stripes alone until the draining transaction ends, waiting for writers
    that reuse an image id or upload a new one, then keeps every key whose image id has a row.
    """
    ids = {key: image_id_of(key) for key in keys}
    lock_stripes(conn, IMAGE_LOCK_CLASS, {i for i in ids.values() if i}, exclusive=True)
    in_use = {row[0] for row in conn.execute(queries.load("images/select_images_in_use"),
                                             {"image_ids": sorted({i for i in ids.values() if i})})}
    needed = {key for key, image_id in ids.items() if image_id is None or image_id in in_use}
    if needed:
        log.info("keeping %d owed image files: their image id has a row again", len(needed))
    yield needed


@dataclass(frozen=True)
class ImageSettings:
    """How photos are cut and stored: sizes (Variable blobgc_image_sizes), watermark, limits, bucket."""

    bucket: str
    sizes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SIZES))
    watermark: Watermark | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_upload_bytes: int = DEFAULT_MAX_BYTES


def store_new_image(
    conn: psycopg.Connection,
    s3,
    settings: ImageSettings,
    data: bytes,
    insert_rows: Callable[[psycopg.Connection, str], object],
    *,
    run_id: str = "upload",
) -> str:
    """Crop-resize-split-upload `data` under a new image id, then insert its rows; return the id.

    `insert_rows(conn, image_id)` runs in the transaction that removes the upload intent. Raises
    ImageRejected (nothing uploaded, nothing owed) for bytes that are not an acceptable image.
    """
    rendered = render_sizes(data, settings.sizes, watermark=settings.watermark, max_pixels=settings.max_pixels)
    image_id = new_image_id()
    keys = image_keys(image_id, rendered)
    bodies = dict(zip(keys, rendered.values(), strict=True))
    with session_stripe(conn, IMAGE_LOCK_CLASS, image_id, exclusive=False):
        with conn.transaction():
            (log_id,) = conn.execute(queries.load("images/insert_upload_intent"), {
                "dag_id": CLEANUP_DAG, "run_id": f"intent:{run_id}", "source": SOURCE, "bucket": settings.bucket,
                "keys": keys, "sizes": [len(b) for b in bodies.values()],
            }).fetchone()
        try:
            for key, body in bodies.items():
                s3.put_object(Bucket=settings.bucket, Key=key, Body=body, ContentType="image/jpeg")
        except Exception:
            # what was uploaded goes now if S3 lets us; otherwise it stays owed for the cleaner's drain
            try:
                cleaned = not delete_objects_in_batches(s3, settings.bucket, keys).failed
            except Exception:  # noqa: BLE001 - S3 is failing; the intent keeps the keys owed
                cleaned = False
            if cleaned:
                with conn.transaction():
                    conn.execute(queries.load("images/delete_upload_intent"), {"log_id": log_id})
            raise
        with conn.transaction():
            insert_rows(conn, image_id)
            conn.execute(queries.load("images/insert_image_file"),
                         {"image_id": image_id, "keys": keys, "sizes": [len(b) for b in bodies.values()]})
            conn.execute(queries.load("images/delete_upload_intent"), {"log_id": log_id})
    log.info("stored image %s: %d sizes, %s", image_id, len(keys), human_bytes(sum(map(len, bodies.values()))))
    return image_id


# ---------------------------------------------------------------------------------------------- writers
def insert_image_rows(conn: psycopg.Connection, rows: list[tuple], *, require_existing: bool) -> list[tuple]:
    """Insert (image_id, offer_id, url_hash, body_hash, num) rows; with `require_existing`, only for image
    ids that still have a row (call with their stripes held shared)."""
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    return conn.execute(queries.load("images/insert_images"), {
        "image_ids": list(columns[0]), "offer_ids": list(columns[1]), "url_hashes": list(columns[2]),
        "body_hashes": list(columns[3]), "nums": list(columns[4]), "require_existing": require_existing,
    }).fetchall()


def pre_upload(conn: psycopg.Connection, s3, settings: ImageSettings, body: bytes) -> str:
    """The seed's `/pre-upload-photo/`: the image id for `body`, processing it only if these bytes are new.

    Rows with the same body hash are touched (their grace starts again); an unbound one is reused,
    or an unbound row with the same image id is added. New bytes are crop-resize-split-uploaded
    once, with an unbound row. Raises ImageRejected for bytes that are not an acceptable image.
    """
    if len(body) > settings.max_upload_bytes:
        raise ImageRejected("oversize", f"{len(body):,} bytes is over the upload limit of "
                                        f"{settings.max_upload_bytes:,}")
    body_hash = md5_hex(body)
    with conn.transaction():
        rows = conn.execute(queries.load("images/touch_images_by_body"), {"body_hash": body_hash}).fetchall()
        if rows:
            rows.sort()
            image_id = rows[0][1]
            lock_stripes(conn, IMAGE_LOCK_CLASS, [image_id], exclusive=False)
            if not any(offer_id is None and iid == image_id for _, iid, offer_id in rows):
                insert_image_rows(conn, [(image_id, None, None, body_hash, 0)], require_existing=True)
            return image_id
    return store_new_image(conn, s3, settings, body,
                           lambda c, image_id: insert_image_rows(c, [(image_id, None, None, body_hash, 0)],
                                                                 require_existing=False),
                           run_id="pre-upload")


class UnknownImage(LookupError):
    """An attach named an image id with no row (never uploaded, or already cleaned up)."""


def attach_images(conn: psycopg.Connection, offer_id: int, image_ids: list[str]) -> None:
    """Bind exactly `image_ids` to the offer, in that order (`num` from 1), as the seed's form submit does.

    Rows of the offer not in the list are unbound (their grace starts). An image id bound
    elsewhere gets a new row; an unbound row is bound. Raises UnknownImage, changing nothing, when
    an id has no row at all.
    """
    with conn.transaction():
        lock_stripes(conn, IMAGE_LOCK_CLASS, image_ids, exclusive=False)
        rows = conn.execute(queries.load("images/select_offer_images"),
                            {"offer_id": offer_id, "image_ids": image_ids}).fetchall()
        by_image: dict[str, list[tuple]] = {}
        for row in rows:
            by_image.setdefault(row[1], []).append(row)
        missing = [i for i in image_ids if i not in by_image]
        if missing:
            raise UnknownImage(f"no image with id {', '.join(missing)}: upload it again")
        binds: list[tuple[int, int, int, bool]] = []
        inserts: list[tuple] = []
        kept: set[int] = set()
        for num, image_id in enumerate(dict.fromkeys(image_ids), start=1):
            candidates = by_image[image_id]
            own = [r for r in candidates if r[2] == offer_id and r[0] not in kept]
            unbound = [r for r in candidates if r[2] is None and r[0] not in kept]
            if own or unbound:
                row = (own or unbound)[0]
                binds.append((row[0], offer_id, num, not own))
                kept.add(row[0])
            else:
                inserts.append((image_id, offer_id, candidates[0][3], candidates[0][4], num))
        if binds:
            ids, offers, nums, rebind = (list(c) for c in zip(*binds, strict=True))
            conn.execute(queries.load("images/update_image_bindings"),
                         {"ids": ids, "offer_ids": offers, "nums": nums, "rebind": rebind})
        insert_image_rows(conn, inserts, require_existing=True)
        stale = [r[0] for r in rows if r[2] == offer_id and r[0] not in kept]
        if stale:
            conn.execute(queries.load("images/unbind_images"), {"ids": stale})


# ---------------------------------------------------------------------------------------------- crawler
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
        rows = conn.execute(queries.load("images/select_cached_images"),
                            {"url_hashes": sorted({i.url_hash for i in items})}).fetchall()
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
            changed = {r[0] for r in conn.execute(queries.load("images/update_image_bindings"), {
                "ids": [b[1] for b in binds], "offer_ids": [b[0].offer_id for b in binds],
                "nums": [b[0].num for b in binds], "rebind": [b[2] for b in binds],
            })}
            for item, row_id, _ in binds:
                if row_id not in changed:  # rebound or deleted by someone else meanwhile: start over
                    outcomes.pop(item.item_no, None)
                    misses.append(item)
        if inserts:
            lock_stripes(conn, IMAGE_LOCK_CLASS, [image_id for _, image_id, _ in inserts], exclusive=False)
            done = insert_image_rows(conn, [(image_id, item.offer_id, item.url_hash, body_hash, item.num)
                                            for item, image_id, body_hash in inserts], require_existing=True)
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
    existing = {r[0] for r in conn.execute(queries.load("crawler/select_existing_offers"),
                                           {"ids": sorted({i.offer_id for i in items})})}
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
            delay = random.uniform(0, backoff * 2 ** attempt)
            log.warning("%s: %s (%s); retry %d of %d in %.3fs", what, type(error).__name__,
                        str(error).splitlines()[0], attempt + 1, attempts - 1, delay)
            sleep(delay)
    raise AssertionError("unreachable")


class CrawlOutcomes(dict[int, CrawlOutcome]):
    """The outcome of each crawled item by item number, and how many database transactions were retried
    after a deadlock or serialization failure (`retries`)."""

    retries: int = 0


def crawl(
    conn: psycopg.Connection,
    s3,
    session,
    settings: ImageSettings,
    items: list[CrawlItem],
    *,
    seen_since: datetime,
    policy: DownloadPolicy = DEFAULT_POLICY,
    run_id: str = "crawl",
) -> CrawlOutcomes:
    """Crawl `items` following the seed's three branches; bad URLs are recorded as failed, never raised.

    Cached URLs are handled in one batch (`apply_cached`). Each remaining URL is downloaded once,
    under its URL-hash stripe (so a concurrent run waits rather than downloading it too), and its
    first row is inserted with the new files; further offers in the batch get rows with the same
    image id. The cached batch and each URL group are units of work that are retried whole when
    PostgreSQL picks them as a deadlock victim (`retry_on_conflict`); a URL's body is downloaded
    once however often its group is retried. Downloads follow `policy`, which refuses private
    addresses (`blobgc.downloads`); a refused URL is recorded as failed with its reason.
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
            conn, lambda g=group, b=bodies: crawl_url_group(conn, s3, session, settings, g, seen_since=seen_since,
                                                            policy=policy, run_id=run_id, bodies=b),
            what=f"crawl of {group[0].url}")
        outcomes.retries += retries
        outcomes.update(done)
    counts = Counter(o.outcome for o in outcomes.values())
    log.info("crawled %d URLs: %s; %d transactions retried after a deadlock", len(items), dict(counts),
             outcomes.retries)
    return outcomes


def crawl_url_group(
    conn: psycopg.Connection,
    s3,
    session,
    settings: ImageSettings,
    group: list[CrawlItem],
    *,
    seen_since: datetime,
    policy: DownloadPolicy,
    run_id: str,
    bodies: dict[str, bytes],
) -> dict[int, CrawlOutcome]:
    """The items of one URL not found in the cache: download it once (kept in `bodies`), crop-resize-split-upload,
    and insert a row per item, all under the URL-hash stripe held alone; return the items' outcomes."""
    outcomes: dict[int, CrawlOutcome] = {}
    url_hash = group[0].url_hash
    with session_stripe(conn, URL_LOCK_CLASS, url_hash, exclusive=True):
        cached, remaining = apply_cached(conn, group, seen_since)  # another run may have just fetched it
        outcomes.update(cached)
        if not remaining:
            return outcomes
        try:
            if url_hash not in bodies:
                bodies[url_hash] = download(session, remaining[0].url, policy)
            body = bodies[url_hash]
            body_hash = md5_hex(body)
            image_id = store_new_image(
                conn, s3, settings, body,
                lambda c, new_id: insert_image_rows(
                    c, [(new_id, i.offer_id, i.url_hash, body_hash, i.num) for i in remaining], require_existing=False),
                run_id=run_id,
            )
        except (DownloadFailed, ImageRejected) as error:
            log.warning("%s: %s (%s)", remaining[0].url, error.kind, error)
            for item in remaining:
                outcomes[item.item_no] = CrawlOutcome("failed", error=f"{error.kind}: {error}")
            return outcomes
        except psycopg.errors.ForeignKeyViolation:
            # an offer was deleted while its photo was fetched: the files stay owed (the upload
            # intent) and the cleaner deletes them; the URL is recorded as failed for every offer
            for item in remaining:
                outcomes[item.item_no] = CrawlOutcome("failed", error="offer_gone: an offer was deleted "
                                                                      "while its photo was fetched")
            return outcomes
    outcomes[remaining[0].item_no] = CrawlOutcome("new", image_id)
    for item in remaining[1:]:
        outcomes[item.item_no] = CrawlOutcome("linked", image_id)
    return outcomes


# ---------------------------------------------------------------------------------------------- cleanup
@dataclass
class CleanupResult:
    rows_deleted: int = 0
    images_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    kept_in_use: int = 0
    batches: int = 0
    sample_keys: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if k != "sample_keys"}


def files_of(
    image_ids: list[str], stored: list[tuple[str, list[str], list[int]]], settings: ImageSettings
) -> tuple[list[str], list[int | None]]:
    """The keys and sizes of the image ids' files: as stored (`blobgc.image_file`), else the configured sizes."""
    known = {image_id: (keys, sizes) for image_id, keys, sizes in stored}
    keys: list[str] = []
    sizes: list[int | None] = []
    for image_id in image_ids:
        if image_id in known:
            keys += known[image_id][0]
            sizes += known[image_id][1]
        else:  # stored before blobgc recorded files: the sizes configured now, bytes unknown
            configured = image_keys(image_id, settings.sizes)
            keys += configured
            sizes += [None] * len(configured)
    return keys, sizes


def delete_unbound_images(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    cutoff: datetime,
    settings: ImageSettings,
    batch_size: int = 1000,
) -> CleanupResult:
    """Delete unbound rows untouched since before `cutoff` (rows first), and owe the files of image ids left with no row.

    Each batch is one transaction: claim and delete the rows (FOR UPDATE SKIP LOCKED), re-check
    which of their image ids still have a row (bound, or fresh), and owe the files of the others.
    The drain re-checks again under the image-id stripes before deleting anything.
    """
    if run.dry_run:
        return preview_cleanup(conn, run, cutoff=cutoff, settings=settings, batch_size=batch_size)
    result = CleanupResult()
    after = 0
    while True:
        with conn.transaction():
            rows = conn.execute(queries.load("images/delete_unbound_images"),
                                {"cutoff": cutoff, "after": after, "batch_size": batch_size}).fetchall()
            if not rows:
                break
            after = max(row_id for row_id, _ in rows)
            image_ids = sorted({image_id for _, image_id in rows})
            in_use = {r[0] for r in conn.execute(queries.load("images/select_images_in_use"), {"image_ids": image_ids})}
            doomed = [i for i in image_ids if i not in in_use]
            stored = conn.execute(queries.load("images/delete_image_files"), {"image_ids": doomed}).fetchall()
            keys, sizes = files_of(doomed, stored, settings)
            record_deletions(conn, run, source=SOURCE, bucket=settings.bucket, keys=keys, sizes=sizes)
            add_counts(conn, run, rows=len(rows))
        result.batches += 1
        result.rows_deleted += len(rows)
        result.images_deleted += len(doomed)
        result.objects_owed += len(keys)
        result.bytes_owed += sum(size or 0 for size in sizes)
        result.kept_in_use += len(in_use)
        result.sample_keys += keys[: max(0, SAMPLE - len(result.sample_keys))]
        log.info("batch %d: deleted %d unbound rows; files of %d image ids owed, %d image ids still in use",
                 result.batches, len(rows), len(doomed), len(in_use))
        if len(rows) < batch_size:
            break
    return result


def preview_cleanup(
    conn: psycopg.Connection, run: RunRef, *, cutoff: datetime, settings: ImageSettings, batch_size: int
) -> CleanupResult:
    """A dry run's report: the rows and files the cleanup would remove, also logged with `dry_run = true`."""
    result = CleanupResult()
    with conn.transaction():
        groups = conn.execute(queries.load("images/select_cleanup_preview"), {"cutoff": cutoff}).fetchall()
        doomed = [image_id for image_id, _, goes in groups if goes]
        result.rows_deleted = sum(n for _, n, _ in groups)
        result.images_deleted = len(doomed)
        result.kept_in_use = len(groups) - len(doomed)
        stored = conn.execute(queries.load("images/select_image_files"), {"image_ids": doomed}).fetchall()
        keys, sizes = files_of(doomed, stored, settings)
        result.objects_owed = len(keys)
        result.bytes_owed = sum(size or 0 for size in sizes)
        result.batches = replace_dry_run_log(conn, run, source=SOURCE, bucket=settings.bucket, keys=keys, sizes=sizes,
                                             batch_size=batch_size)
        set_counts(conn, run, rows=result.rows_deleted, objects=result.objects_owed, bytes_=result.bytes_owed)
    result.sample_keys = keys[:SAMPLE]
    log.info("dry run: would delete %d unbound rows and the files of %d image ids (%d objects); sample: %s",
             result.rows_deleted, result.images_deleted, result.objects_owed, result.sample_keys[:5])
    return result
