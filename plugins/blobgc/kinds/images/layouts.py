"""Seed 001's key layout: an image's files, `images/{id[0:2]}/{id}/{size}.jpg`, accounted for by `app.image`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psycopg

from blobgc.core import locks, queries
from blobgc.core.keys import KeyLayout, Verdict
from blobgc.core.objects import ObjectStore


@contextmanager
def hold_unreferenced_images(
    layout: KeyLayout, conn: psycopg.Connection, _s3: ObjectStore, _bucket: str, keys: list[str]
) -> Iterator[Verdict]:
    """Seed 001's guard: yield the image files whose image id has a row again, hold the others.

    Takes the image ids' stripes alone until the draining transaction ends (`blobgc.core.locks`),
    waiting for writers that reuse an image id or upload a new one, then keeps every key whose image
    id has a row.
    """
    ids = {key: layout.identity(key) for key in keys}
    wanted = sorted({i for i in ids.values() if i is not None})
    locks.lock_stripes(conn, locks.IMAGE_LOCK_CLASS, wanted, exclusive=True)
    in_use = {
        row[0]
        for row in conn.execute(
            queries.load("guards/select_images_in_use", "blobgc.kinds.images"), {"image_ids": wanted}
        )
    }
    yield Verdict(
        {key for key, image_id in ids.items() if image_id is not None and image_id in in_use}, layout.unreadable(ids)
    )


# Any text image id: its first two characters (one, for a one-character id), the id, then a size name (which
# settings.check_image_sizes keeps to [a-z0-9_]+) and the extension; one reading for every id.
IMAGE_FILES = KeyLayout(
    "app.image",
    "images/",
    3,
    re.compile(
        r"images/(?P<shard>.{1,2})/(?P<id>(?P=shard).*)/"
        r"(?P<size>[A-Za-z0-9_]+)\.(?P<ext>[a-z0-9]+)",
        re.DOTALL,
    ),
    hold_unreferenced_images,
)
IMAGE_EXT = "jpg"  # every size is stored as JPEG


def image_keys(image_id: str, sizes: Iterable[str]) -> list[str]:
    """`images/{image_id[0:2]}/{image_id}/{size}.jpg` for every size name."""
    return [f"images/{image_id[:2]}/{image_id}/{name}.{IMAGE_EXT}" for name in sizes]
