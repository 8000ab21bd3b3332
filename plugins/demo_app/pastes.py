"""Seed 002's application write path: a paste, its deduplicated content (with a reference count) and its cache entry.

Identical content is stored once, as `pastes/{content_hash}` (`blobgc.kinds.pastes.layouts.content_key`);
`app.content.ref_count` counts the pastes that point at it. blobgc_paste_expiry deletes expired
pastes and the contents they leave unused.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg

from blobgc.kinds.pastes.layouts import content_key
from demo_app import statements

SHORT_CODE_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
DEFAULT_CACHE_TTL = timedelta(days=1)


def content_hash(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def new_short_code() -> str:
    return "".join(secrets.choice(SHORT_CODE_ALPHABET) for _ in range(8))


@dataclass(frozen=True)
class Paste:
    short_code: str
    content_hash: str
    expires_at: datetime
    content_is_new: bool


def create_paste(
    conn: psycopg.Connection,
    s3,
    redis,
    *,
    bucket: str,
    content: bytes,
    expires_at: datetime,
    short_code: str | None = None,
    redis_prefix: str = "",
    cache_ttl: timedelta | None = DEFAULT_CACHE_TTL,
) -> Paste:
    """The application's paste creation: hash, upsert the content, upload it when new, insert the paste, cache it.

    The content upsert, the upload and the paste insert share one transaction: a failed upload
    leaves no row, and a writer of the same content waits on the row lock instead of racing it
    (or on the placeholder row of a deletion in progress: then it creates the content anew). The
    cache entry lives `cache_ttl` (not until `expires_at`), so expiry must purge it.
    """
    digest = content_hash(content)
    short_code = short_code or new_short_code()
    with conn.transaction():
        (inserted,) = conn.execute(
            statements.load("pastes/upsert_content"), {"content_hash": digest, "size_bytes": len(content)}
        ).fetchone()
        if inserted:
            s3.put_object(Bucket=bucket, Key=content_key(digest), Body=content, ContentType="text/plain")
        conn.execute(
            statements.load("pastes/insert_paste"),
            {"short_code": short_code, "content_hash": digest, "expires_at": expires_at},
        )
    if redis is not None:
        redis.set(f"{redis_prefix}{short_code}", content, ex=int(cache_ttl.total_seconds()) if cache_ttl else None)
    return Paste(short_code, digest, expires_at, bool(inserted))
