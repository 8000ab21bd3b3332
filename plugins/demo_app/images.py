"""Seed 001's application side: photos cut into sizes and stored once, bound to offers by rows that may repeat.

`app.image` rows may share an `image_id` (the files `images/{id[:2]}/{id}/{size}.jpg`,
`blobgc.kinds.images.layouts.image_keys`); a row with no offer is a photo kept for later, removed by
blobgc_image_cleanup after the grace. The writers here are the seed's `/pre-upload-photo/`
(`pre_upload`), the form submit (`attach_images`) and the store of a new photo that the crawler
uses too (`store_new_image`).

**Why files are never deleted under a row.** Every writer that adds a row for an existing image id
holds that id's stripe shared while it checks that a row with the id still exists and inserts its
own (`blobgc.core.locks`); the cleaner's drain holds the stripe alone while it checks that no row
is left and deletes the files.

**Why an upload never leaves orphans.** A new image's keys are owed (an intent) before its files are
uploaded, and the row insert cancels the intent in one transaction (`blobgc.core.uploads`).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from blobgc.core import queries
from blobgc.core.locks import IMAGE_LOCK_CLASS, lock_stripes, session_stripe
from blobgc.core.sizes import human_bytes
from blobgc.core.uploads import upload_with_intent
from blobgc.kinds.images.layouts import IMAGE_FILES, image_keys
from blobgc.kinds.images.rows import insert_image_rows
from demo_app import statements
from demo_app.downloads import DEFAULT_MAX_BYTES
from demo_app.image_processing import DEFAULT_MAX_PIXELS, DEFAULT_SIZES, ImageRejected, Watermark, render_sizes

log = logging.getLogger(__name__)

CLEANUP_DAG = "blobgc_image_cleanup"  # owes (and drains) every image file deletion, upload intents included


def new_image_id() -> str:
    return uuid.uuid4().hex


def md5_hex(data: bytes | str) -> str:
    return hashlib.md5(data.encode() if isinstance(data, str) else data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class ImageSettings:
    """How photos are cut and stored: sizes (Variable blobgc_image_sizes), watermark, limits, bucket."""

    bucket: str
    sizes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SIZES))
    watermark: Watermark | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_upload_bytes: int = DEFAULT_MAX_BYTES


def image_settings(bucket: str, sizes: dict[str, int], watermark: tuple[str, int] | None = None) -> ImageSettings:
    """How the application stores photos, from blobgc's Variables (bucket, sizes, optional watermark)."""
    return ImageSettings(bucket=bucket, sizes=sizes, watermark=Watermark(*watermark) if watermark else None)


def storer(s3, settings: ImageSettings, *, run_id: str) -> Callable[[psycopg.Connection, bytes, Callable], str]:
    """A `store(conn, body, insert_rows) -> image_id` for the crawler: `store_new_image` with these settings."""
    return lambda conn, body, insert_rows: store_new_image(conn, s3, settings, body, insert_rows, run_id=run_id)


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

    `insert_rows(conn, image_id)` runs in the transaction that cancels the upload intent. Raises
    ImageRejected (nothing uploaded, nothing owed) for bytes that are not an acceptable image.
    """
    rendered = render_sizes(data, settings.sizes, watermark=settings.watermark, max_pixels=settings.max_pixels)
    image_id = new_image_id()
    keys = image_keys(image_id, rendered)
    bodies = dict(zip(keys, rendered.values(), strict=True))

    def account(c: psycopg.Connection) -> None:
        insert_rows(c, image_id)
        c.execute(
            statements.load("images/insert_image_file"),
            {"image_id": image_id, "keys": keys, "sizes": [len(b) for b in bodies.values()]},
        )

    with session_stripe(conn, IMAGE_LOCK_CLASS, image_id, exclusive=False):  # no drain deletes them mid-upload
        upload_with_intent(
            conn,
            s3,
            bucket=settings.bucket,
            bodies=bodies,
            content_type="image/jpeg",
            owed_to=CLEANUP_DAG,
            source=IMAGE_FILES.source,
            run_id=run_id,
            account=account,
        )
    log.info("stored image %s: %d sizes, %s", image_id, len(keys), human_bytes(sum(map(len, bodies.values()))))
    return image_id


def pre_upload(conn: psycopg.Connection, s3, settings: ImageSettings, body: bytes) -> str:
    """The seed's `/pre-upload-photo/`: the image id for `body`, processing it only if these bytes are new.

    Rows with the same body hash are touched (their grace starts again); an unbound one is reused,
    or an unbound row with the same image id is added. New bytes are crop-resize-split-uploaded
    once, with an unbound row. Raises ImageRejected for bytes that are not an acceptable image.
    """
    if len(body) > settings.max_upload_bytes:
        raise ImageRejected(
            "oversize", f"{len(body):,} bytes is over the upload limit of {settings.max_upload_bytes:,}"
        )
    body_hash = md5_hex(body)
    with conn.transaction():
        rows = conn.execute(statements.load("images/touch_images_by_body"), {"body_hash": body_hash}).fetchall()
        if rows:
            rows.sort()
            image_id = rows[0][1]
            lock_stripes(conn, IMAGE_LOCK_CLASS, [image_id], exclusive=False)
            if not any(offer_id is None and iid == image_id for _, iid, offer_id in rows):
                insert_image_rows(conn, [(image_id, None, None, body_hash, 0)], require_existing=True)
            return image_id
    return store_new_image(
        conn,
        s3,
        settings,
        body,
        lambda c, image_id: insert_image_rows(c, [(image_id, None, None, body_hash, 0)], require_existing=False),
        run_id="pre-upload",
    )


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
        rows = conn.execute(
            statements.load("images/select_offer_images"), {"offer_id": offer_id, "image_ids": image_ids}
        ).fetchall()
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
            conn.execute(
                queries.load("images/update_image_bindings", "blobgc.kinds.images"),
                {"ids": ids, "offer_ids": offers, "nums": nums, "rebind": rebind},
            )
        insert_image_rows(conn, inserts, require_existing=True)
        stale = [r[0] for r in rows if r[2] == offer_id and r[0] not in kept]
        if stale:
            conn.execute(statements.load("images/unbind_images"), {"ids": stale})
