"""The one registry of key layouts: how an object's key is formed, read back, sharded and guarded.

Every family of objects blobgc deletes has one `KeyLayout` here, registered under its deletion-log
*source* (the table, or store, that accounts for its keys). A layout

- formats keys from a row (the functions beside it: `blob_keys`, `content_key`, `image_keys`, ...);
- parses a key back into the identity of the row that accounts for it (`KeyLayout.identity`);
- names its literal prefix, which reconcile lists, and its shards (the prefix plus `shard_chars`);
- names the guard that decides at drain time whether an owed key is still accounted for.

The sweep, reconcile, restore, generations, the media cleaners, the outbox and the application's
writers all read layouts from here; nobody else writes a key's regex.

**Guards.** The outbox calls a layout's guard inside the draining transaction, just before the
delete: it returns the keys a row (or a master object) accounts for again, which are kept, and it
holds the rest, by a lock or an uncommitted row, until the transaction ends.
"""
from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone

import psycopg
from psycopg import sql as pgsql

from blobgc.core import collections, locks, queries
from blobgc.core.objects import first_key

log = logging.getLogger(__name__)

# A guard: (its layout, the draining connection, the S3 client, the bucket, the owed keys) -> a context that
# yields the keys to keep and holds the others until the draining transaction ends.
Guard = Callable[["KeyLayout", psycopg.Connection, object, str, list[str]], AbstractContextManager[set[str]]]


class KeyLayoutError(ValueError):
    """A value that does not fit a key layout (a month that is not a month, a key that is not a master)."""


@dataclass(frozen=True)
class KeyLayout:
    """One family of keys: its deletion-log source, prefix, shards, whole-key pattern and guard."""

    source: str  # what accounts for the keys: a table ("app.blob"), or a store without one ("media.thumbnails")
    prefix: str  # the literal text every key starts with (what reconcile lists); "" for keys led by a user id
    shard_chars: int  # a listing shard is the prefix plus this many characters
    pattern: re.Pattern[str]  # a whole key; group "id" is the identity of what accounts for it
    guard: Guard | None = None

    def identity(self, key: str) -> str | None:
        """The identity (a row's id, a content hash) of the key, or None for a key of another layout."""
        match = self.pattern.fullmatch(key)
        return match["id"] if match else None

    def shard(self, key: str) -> str:
        return key[:len(self.prefix) + self.shard_chars]

    def hold(self, conn: psycopg.Connection, s3, bucket: str, keys: list[str]) -> AbstractContextManager[set[str]]:
        """The layout's guard over `keys` (see the module docstring); with no guard, nothing is kept."""
        if self.guard is None:
            return nullcontext(set())
        return self.guard(self, conn, s3, bucket, keys)


# ------------------------------------------------------------------------------------------------- guards
def row_guard(schema: str, table: str, column: str) -> Guard:
    """Keep every key whose identity has a row in `schema.table` now (and any key that fits no layout).

    Reconcile owes a key that no row accounted for when it listed; a row inserted since (an upload
    whose object was written long before its row, a multipart upload dated by its initiation) makes
    it needed again.
    """
    query = pgsql.SQL("SELECT {c}::text FROM {t} WHERE {c}::text = ANY(%(ids)s::text[])").format(
        c=pgsql.Identifier(column), t=pgsql.Identifier(schema, table))

    @contextmanager
    def keep_keys_with_a_row(layout: KeyLayout, conn: psycopg.Connection, _s3, _bucket: str,
                             keys: list[str]) -> Iterator[set[str]]:
        ids = {key: layout.identity(key) for key in keys}
        wanted = sorted({i for i in ids.values() if i})
        existing = {r[0] for r in conn.execute(query, {"ids": wanted})} if wanted else set()
        yield {key for key, identity in ids.items() if identity is None or identity in existing}

    return keep_keys_with_a_row


@contextmanager
def hold_unneeded_contents(layout: KeyLayout, conn: psycopg.Connection, _s3, _bucket: str,
                           keys: list[str]) -> Iterator[set[str]]:
    """Seed 002's guard: yield the `pastes/` keys whose content was created again, hold the rest.

    Each hash gets an uncommitted placeholder row: where a committed row exists (the content was
    created again) the key is kept; where a writer is creating it right now, the insert waits for
    that writer and then keeps the key. While the placeholders exist, a new writer of a held hash
    waits on them. They live in a savepoint that is always rolled back after the deletion: the
    waiting writer then finds no row, creates the content anew and uploads the object again.
    """
    hashes = sorted({h for key in keys if (h := layout.identity(key))})
    with conn.transaction(force_rollback=True):
        held = {row[0] for row in conn.execute(queries.load("guards/insert_content_placeholders"), {"hashes": hashes})}
        yield {key for key in keys if layout.identity(key) not in held}


@contextmanager
def hold_unreferenced_images(layout: KeyLayout, conn: psycopg.Connection, _s3, _bucket: str,
                             keys: list[str]) -> Iterator[set[str]]:
    """Seed 001's guard: yield the image files whose image id has a row again, hold the others.

    Takes the image ids' stripes alone until the draining transaction ends (`blobgc.core.locks`),
    waiting for writers that reuse an image id or upload a new one, then keeps every key whose image
    id has a row.
    """
    ids = {key: layout.identity(key) for key in keys}
    wanted = sorted({i for i in ids.values() if i})
    locks.lock_stripes(conn, locks.IMAGE_LOCK_CLASS, wanted, exclusive=True)
    in_use = {row[0] for row in conn.execute(queries.load("guards/select_images_in_use"), {"image_ids": wanted})}
    yield {key for key, image_id in ids.items() if image_id is None or image_id in in_use}


@contextmanager
def hold_unreferenced_mail(layout: KeyLayout, conn: psycopg.Connection, _s3, _bucket: str,
                           keys: list[str]) -> Iterator[set[str]]:
    """Seed 003's guard: yield the `mail/` keys whose blob has a row now, holding the others.

    Takes the blobs' generations alone until the draining transaction ends, as the collector does:
    a writer storing into one of them is waited for, and its row is then seen; a later writer waits
    until the deletion is done.
    """
    ids = {key: layout.identity(key) for key in keys}
    for generation in sorted({g for i in ids.values() if i and (g := generation_of(i)) is not None}):
        locks.hold_generation_alone(conn, generation)
    wanted = sorted({i for i in ids.values() if i})
    existing = {r[0] for r in conn.execute(queries.load("guards/select_existing_mail_blobs"), {"ids": wanted})} \
        if wanted else set()
    yield {key for key, blob_id in ids.items() if blob_id is None or blob_id in existing}


@contextmanager
def keep_thumbnails_with_a_master(_layout: KeyLayout, _conn, s3, bucket: str, keys: list[str]) -> Iterator[set[str]]:
    """Seed 004's guard: keep an orphan thumbnail whose master exists again (a profile slot uploaded anew
    since the check), by one listing per master prefix, just before the deletion."""
    by_master: dict[str, list[str]] = {}
    for key in keys:
        prefix = master_prefix_of_thumb(key)
        if prefix is not None:
            by_master.setdefault(prefix, []).append(key)
    yield {k for prefix, ks in by_master.items() if first_key(s3, bucket, prefix, "") is not None for k in ks}


# --------------------------------------------------------------------------------------- seed 000: blobs
BLOB_ID = r"[0-9A-Za-z_-]{1,64}"
BLOB_OBJECTS = KeyLayout("app.blob", "blobs/", 1, re.compile(rf"blobs/(?P<id>{BLOB_ID})/(?:raw|thumbnail)"),
                         row_guard("app", "blob", "id"))


def blob_keys(blob_id: str) -> tuple[str, str]:
    """The objects a blob owns: its raw upload and its thumbnail (which the application may never have made)."""
    return f"blobs/{blob_id}/raw", f"blobs/{blob_id}/thumbnail"


# -------------------------------------------------------------------------------------- seed 002: pastes
PASTE_CONTENTS = KeyLayout("app.content", "pastes/", 1, re.compile(r"pastes/(?P<id>[0-9a-f]{64})"),
                           hold_unneeded_contents)


def content_key(digest: str) -> str:
    """The object of a paste's content: `pastes/{content_hash}`."""
    return f"pastes/{digest}"


# -------------------------------------------------------------------------------------- seed 001: images
IMAGE_FILES = KeyLayout("app.image", "images/", 3,
                        re.compile(r"images/(?P<shard>[0-9a-f]{2})/(?P<id>(?P=shard)[0-9a-f]{30})/"
                                   r"(?P<size>[A-Za-z0-9_]+)\.(?P<ext>[a-z0-9]+)"),
                        hold_unreferenced_images)
IMAGE_EXT = "jpg"  # every size is stored as JPEG


def image_keys(image_id: str, sizes: Iterable[str]) -> list[str]:
    """`images/{image_id[0:2]}/{image_id}/{size}.jpg` for every size name."""
    return [f"images/{image_id[:2]}/{image_id}/{name}.{IMAGE_EXT}" for name in sizes]


# ---------------------------------------------------------------------------------------- seed 003: mail
MAIL_BLOB_ID = r"[0-9A-Za-z_.:-]{1,200}"
MAIL_BLOBS = KeyLayout("gen.blob", "mail/", 1, re.compile(rf"mail/(?P<id>{MAIL_BLOB_ID})"), hold_unreferenced_mail)


def mail_key(blob_id: str) -> str:
    return f"mail/{blob_id}"


def mail_blob_id(content_hash: str, generation: int) -> str:
    """The id of a blob of `generation` holding content with this sha256 hex digest."""
    return f"{content_hash}-g{generation}"


def generation_of(blob_id: str) -> int | None:
    """The generation embedded in a blob id made by `mail_blob_id`, or None for any other id."""
    digest, sep, generation = blob_id.rpartition("-g")
    return int(generation) if sep and len(digest) == 64 and generation.isdigit() else None


# ------------------------------------------------------------------------------------ seed 004: media store
USER = r"[0-9A-Za-z_-]{1,64}"
SLOT = r"[a-z][a-z0-9_]{0,31}"
MEDIA_EXT = r"jpg|jpeg|png|webp|heic"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
USER_ID = re.compile(USER)
SLOT_NAME = re.compile(SLOT)
MASTER = re.compile(rf"(?P<user>{USER})/masters/(?P<rev>\d{{6}})/(?P<stem>[0-9a-f]{{16}})\.(?P<ext>{MEDIA_EXT})")
THUMB = re.compile(rf"(?P<user>{USER})/thumbs/(?P<rev>\d{{6}})/(?P<stem>[0-9a-f]{{16}})_(?P<w>\d{{1,5}})"
                   r"x(?P<h>\d{1,5})\.webp")
PROFILE_MASTER = re.compile(rf"(?P<user>{USER})/masters/(?P<slot>{SLOT})\.(?P<ext>{MEDIA_EXT})")
PROFILE_THUMB = re.compile(rf"(?P<user>{USER})/thumbs/(?P<slot>{SLOT})_(?P<w>\d{{1,5}})x(?P<h>\d{{1,5}})\.webp")
STAGING = re.compile(rf"staging/(?P<user>{USER})/(?P<uuid>{UUID})\.(?P<ext>{MEDIA_EXT})")
PROFILE_STAGING = re.compile(rf"profiles-staging/(?P<user>{USER})/(?P<slot>{SLOT})/(?P<uuid>{UUID})"
                             rf"\.(?P<ext>{MEDIA_EXT})")
STAGING_PREFIXES = {"images": "staging/", "profiles": "profiles-staging/"}  # bucket kind -> its staging prefix
STAGING_LAYOUTS = {"staging/": STAGING, "profiles-staging/": PROFILE_STAGING}  # staging prefix -> its only layout
# A user with one of these ids would keep masters under a staging prefix, where staging is cleaned.
RESERVED_USER_IDS = frozenset(prefix.rstrip("/") for prefix in STAGING_PREFIXES.values())


def any_of(*patterns: re.Pattern[str]) -> re.Pattern[str]:
    """One pattern matching a whole key of any of `patterns`, itself as group "id" (the object is its own identity)."""
    unnamed = "|".join(re.sub(r"\(\?P<\w+>", "(?:", p.pattern) for p in patterns)
    return re.compile(rf"(?P<id>{unnamed})")


# Both stores' keys start with a user id: the layouts' prefix is empty, a shard is a user id's first character.
MEDIA_THUMBNAILS = KeyLayout("media.thumbnails", "", 1, any_of(THUMB, PROFILE_THUMB), keep_thumbnails_with_a_master)
MEDIA_STAGING = KeyLayout("media.staging", "", 1, any_of(STAGING, PROFILE_STAGING))


def rev_month(yyyymm: int) -> str:
    """`revYYYYMM`: 999999 - YYYYMM, six digits, so later months sort first."""
    if not 100001 <= yyyymm <= 999912 or not 1 <= yyyymm % 100 <= 12:
        raise KeyLayoutError(f"not a YYYYMM month: {yyyymm}")
    return f"{999999 - yyyymm:06d}"


def month_of(when: datetime) -> int:
    when = when.astimezone(timezone.utc)
    return when.year * 100 + when.month


def time8(when: datetime) -> str:
    """0xffffffff minus the milliseconds since the start of `when`'s month (UTC), as 8 hex digits."""
    when = when.astimezone(timezone.utc)
    start = when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    millis = int((when - start).total_seconds() * 1000)
    return f"{0xFFFFFFFF - millis:08x}"


def master_key(user: str, when: datetime, ext: str, hash8: str | None = None) -> str:
    """`{user}/masters/{revYYYYMM}/{time8}{hash8}.{ext}`: a user's listing of masters is newest first."""
    return f"{user}/masters/{rev_month(month_of(when))}/{time8(when)}{hash8 or secrets.token_hex(4)}.{ext}"


def thumb_key(master: str, width: int, height: int) -> str:
    """The thumbnail of a master (image or profile) at one size."""
    return f"{thumb_prefix(master)}{width}x{height}.webp"


def thumb_prefix(master: str) -> str:
    """The prefix of every thumbnail size of a master."""
    if m := MASTER.fullmatch(master):
        return f"{m['user']}/thumbs/{m['rev']}/{m['stem']}_"
    if p := PROFILE_MASTER.fullmatch(master):
        return f"{p['user']}/thumbs/{p['slot']}_"
    raise KeyLayoutError(f"not a master key: {master!r}")


def master_prefix_of_thumb(key: str) -> str | None:
    """The prefix of the master a thumbnail belongs to (any extension), or None for another key."""
    if t := THUMB.fullmatch(key):
        return f"{t['user']}/masters/{t['rev']}/{t['stem']}."
    if p := PROFILE_THUMB.fullmatch(key):
        return f"{p['user']}/masters/{p['slot']}."
    return None


def staging_layout(prefix: str) -> re.Pattern[str]:
    """The one key layout allowed under a staging prefix (or a shard of it, such as `staging/0`)."""
    for staging_prefix, layout in STAGING_LAYOUTS.items():
        if prefix.startswith(staging_prefix):
            return layout
    raise KeyLayoutError(f"{prefix!r} is not under a staging prefix ({', '.join(STAGING_LAYOUTS)})")


# --------------------------------------------------------------------------------------------- the registry
LAYOUTS: dict[str, KeyLayout] = {layout.source: layout for layout in (
    BLOB_OBJECTS, PASTE_CONTENTS, IMAGE_FILES, MAIL_BLOBS, MEDIA_THUMBNAILS, MEDIA_STAGING)}
# the bucket-wide layouts reconcile lists and checks against their tables, in listing order
RECONCILED = (BLOB_OBJECTS, PASTE_CONTENTS, IMAGE_FILES, MAIL_BLOBS)


def layout(source: str) -> KeyLayout | None:
    """The layout registered for a deletion-log source, or None (a source blobgc does not know).

    A collection's source (`collection:<name>`) has a layout made from the collections file when asked
    for: its keys are parsed by the collection's templates, and its guard is `keep_keys_of_collection_rows`.
    """
    if source.startswith(collections.COLLECTION_SOURCE):
        return KeyLayout(source, "", 0, NO_KEY, keep_keys_of_collection_rows)
    return LAYOUTS.get(source)


NO_KEY = re.compile(r"(?!)")  # a collection's keys are parsed by its templates, not one pattern


@contextmanager
def keep_keys_of_collection_rows(layout: KeyLayout, conn: psycopg.Connection, _s3, bucket: str,
                                 keys: list[str]) -> Iterator[set[str]]:
    """A collection's guard: keep every key a row accounts for again (content-addressed keys such as
    `up/{sha}.{ext}` are written again when the same content is uploaded anew), and every key that fits
    none of the collection's templates.

    Reads the collections file now; a collection it no longer declares, or a file that does not check,
    fails the drain with nothing deleted (CollectionsError), so the keys stay owed.
    """
    name = layout.source[len(collections.COLLECTION_SOURCE):]
    declared = collections.load_collections(default_bucket=bucket)
    if name not in declared:
        raise collections.CollectionsError(
            f"{len(keys)} owed keys belong to collection {name!r}, which the collections file "
            f"{collections.collections_path()} no longer declares: they stay owed until it is declared again")
    bound = collections.bind(conn, declared[name], default_bucket=bucket)
    accounted, unparsed = collections.accounted_keys(conn, bound, keys)
    yield accounted | unparsed


