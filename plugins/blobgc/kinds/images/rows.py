"""Binding image rows to stored files: a row is bound to an existing image id only while it still has one.

`insert_image_rows` with `require_existing` inserts under the image id's shared stripe lock
(`blobgc.core.locks`), which the drain's guard (`blobgc.kinds.images.layouts`) takes exclusively.
"""

from __future__ import annotations

import psycopg

from blobgc.core import queries


def insert_image_rows(conn: psycopg.Connection, rows: list[tuple], *, require_existing: bool) -> list[tuple]:
    """Insert (image_id, offer_id, url_hash, body_hash, num) rows; with `require_existing`, only for image
    ids that still have a row (call with their stripes held shared)."""
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    return conn.execute(
        queries.load("images/insert_images", "blobgc.kinds.images"),
        {
            "image_ids": list(columns[0]),
            "offer_ids": list(columns[1]),
            "url_hashes": list(columns[2]),
            "body_hashes": list(columns[3]),
            "nums": list(columns[4]),
            "require_existing": require_existing,
        },
    ).fetchall()
