"""Seed 000's application write path: upload a blob's objects, register it, attach it to posts, poll pages.

The demo, the tests and the benchmark use this to produce data the way the application does:
objects first, then the row, so a row never points at an object that was never written.
"""

from __future__ import annotations

import secrets

import psycopg

from blobgc.kinds.blobs.layouts import blob_keys
from demo_app import statements

BLOB_ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-"


def new_blob_id() -> str:
    """An 11-character random id, like the seed's generate_blob_id()."""
    return "".join(secrets.choice(BLOB_ID_ALPHABET) for _ in range(11))


def upload_blob(
    conn: psycopg.Connection,
    s3,
    bucket: str,
    data: bytes,
    *,
    filename: str,
    mimetype: str,
    thumbnail: bytes | None = None,
    blob_id: str | None = None,
) -> str:
    """Store `blobs/{id}/raw` (and its thumbnail), then insert the `app.blob` row; return the id."""
    blob_id = blob_id or new_blob_id()
    raw_key, thumb_key = blob_keys(blob_id)
    s3.put_object(Bucket=bucket, Key=raw_key, Body=data, ContentType=mimetype)
    if thumbnail is not None:
        s3.put_object(Bucket=bucket, Key=thumb_key, Body=thumbnail, ContentType="image/webp")
    with conn.transaction():
        conn.execute(
            statements.load("blobs/insert_blob"),
            {"id": blob_id, "filename": filename, "mimetype": mimetype, "size_bytes": len(data)},
        )
    return blob_id


def attach_blob(conn: psycopg.Connection, post_id: str, blob_id: str) -> None:
    with conn.transaction():
        conn.execute(statements.load("blobs/insert_blob_attachment"), {"blob_id": blob_id, "post_id": post_id})


def poll_page_usage(conn: psycopg.Connection, blob_id: str, url: str) -> None:
    """Record that the page at `url` uses `blob_id` now, and make the blob PUBLIC (seed 000's BlobPagePoll)."""
    with conn.transaction():
        conn.execute(statements.load("pages/upsert_page_usage"), {"blob_id": blob_id, "url": url})
        conn.execute(statements.load("pages/update_blob_public"), {"blob_id": blob_id})
