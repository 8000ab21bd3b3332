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
delete: it returns a `Verdict`, the keys a row (or a master object) accounts for again, which are
kept, and the keys it cannot judge (a key that fits no layout now), which stay owed with the reason,
parked; it holds the rest, by a lock or an uncommitted row, until the transaction ends.

**Every value a column can hold.** A seed layout's pattern reads back every key its `*_key`
function forms from any text value (a `/`, a `.` or an upper-case letter included): each has one
placeholder between fixed literals, so a key has exactly one reading and the row it names is the
only row that can form it. A collection's templates may have several placeholders and several
readings; whether a row forms a key is then decided in SQL (`blobgc.core.collections.accounted_keys`).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg
from psycopg import sql as pgsql

from blobgc.core import collections, locks, queries
from blobgc.core.catalog import missing_tables
from blobgc.core.objects import first_key

log = logging.getLogger(__name__)


@dataclass
class Verdict:
    """A guard's answer: the owed keys to keep (a row needs them again), and those that stay owed, with why."""

    keep: set[str] = field(default_factory=set)
    stay_owed: dict[str, str] = field(default_factory=dict)
    park: bool = True  # the keys that stay owed are parked at once (False: a drain tries them again)


# A guard: (its layout, the draining connection, the S3 client, the bucket, the owed keys) -> a context that
# yields its Verdict and holds the other keys until the draining transaction ends.
Guard = Callable[["KeyLayout", psycopg.Connection, object, str, list[str]], AbstractContextManager[Verdict]]


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
        return key[: len(self.prefix) + self.shard_chars]

    def hold(self, conn: psycopg.Connection, s3, bucket: str, keys: list[str]) -> AbstractContextManager[Verdict]:
        """The layout's guard over `keys` (see the module docstring); with no guard, nothing is kept."""
        if self.guard is None:
            return nullcontext(Verdict())
        return self.guard(self, conn, s3, bucket, keys)

    def unreadable(self, ids: dict[str, str | None]) -> dict[str, str]:
        """The keys among `ids` (key -> identity) that fit this layout not at all: they stay owed, with why."""
        return {
            key: f"the key does not fit the layout of {self.source} ({self.pattern.pattern}): no row can be "
            "looked up for it, so it is not deleted; delete it by hand if it is garbage"
            for key, identity in ids.items()
            if identity is None
        }


# ------------------------------------------------------------------------------------------------- guards
def row_guard(schema: str, table: str, column: str) -> Guard:
    """Keep every key whose identity has a row in `schema.table` now (and any key that fits no layout).

    Reconcile owes a key that no row accounted for when it listed; a row inserted since (an upload
    whose object was written long before its row, a multipart upload dated by its initiation) makes
    it needed again.
    """
    query = pgsql.SQL("SELECT {c}::text FROM {t} WHERE {c}::text = ANY(%(ids)s::text[])").format(
        c=pgsql.Identifier(column), t=pgsql.Identifier(schema, table)
    )

    @contextmanager
    def keep_keys_with_a_row(
        layout: KeyLayout, conn: psycopg.Connection, _s3, _bucket: str, keys: list[str]
    ) -> Iterator[set[str]]:
        ids = {key: layout.identity(key) for key in keys}
        wanted = sorted({i for i in ids.values() if i is not None})
        existing = {r[0] for r in conn.execute(query, {"ids": wanted})} if wanted else set()
        yield Verdict(
            {key for key, identity in ids.items() if identity is not None and identity in existing},
            layout.unreadable(ids),
        )

    return keep_keys_with_a_row


@contextmanager
def hold_unneeded_contents(
    layout: KeyLayout, conn: psycopg.Connection, _s3, _bucket: str, keys: list[str]
) -> Iterator[set[str]]:
    """Seed 002's guard: yield the `pastes/` keys whose content was created again, hold the rest.

    Each hash gets an uncommitted placeholder row: where a committed row exists (the content was
    created again) the key is kept; where a writer is creating it right now, the insert waits for
    that writer and then keeps the key. While the placeholders exist, a new writer of a held hash
    waits on them. They live in a savepoint that is always rolled back after the deletion: the
    waiting writer then finds no row, creates the content anew and uploads the object again.
    """
    ids = {key: layout.identity(key) for key in keys}
    hashes = sorted({h for h in ids.values() if h is not None})
    with conn.transaction(force_rollback=True):
        held = {row[0] for row in conn.execute(queries.load("guards/insert_content_placeholders"), {"hashes": hashes})}
        yield Verdict({key for key, h in ids.items() if h is not None and h not in held}, layout.unreadable(ids))


@contextmanager
def hold_unreferenced_images(
    layout: KeyLayout, conn: psycopg.Connection, _s3, _bucket: str, keys: list[str]
) -> Iterator[set[str]]:
    """Seed 001's guard: yield the image files whose image id has a row again, hold the others.

    Takes the image ids' stripes alone until the draining transaction ends (`blobgc.core.locks`),
    waiting for writers that reuse an image id or upload a new one, then keeps every key whose image
    id has a row.
    """
    ids = {key: layout.identity(key) for key in keys}
    wanted = sorted({i for i in ids.values() if i is not None})
    locks.lock_stripes(conn, locks.IMAGE_LOCK_CLASS, wanted, exclusive=True)
    in_use = {row[0] for row in conn.execute(queries.load("guards/select_images_in_use"), {"image_ids": wanted})}
    yield Verdict(
        {key for key, image_id in ids.items() if image_id is not None and image_id in in_use}, layout.unreadable(ids)
    )


@contextmanager
def hold_unreferenced_mail(
    layout: KeyLayout, conn: psycopg.Connection, _s3, _bucket: str, keys: list[str]
) -> Iterator[set[str]]:
    """Seed 003's guard: yield the `mail/` keys whose blob has a row now, holding the others.

    Takes the blobs' generations alone until the draining transaction ends, as the collector does:
    a writer storing into one of them is waited for, and its row is then seen; a later writer waits
    until the deletion is done.
    """
    ids = {key: layout.identity(key) for key in keys}
    for generation in sorted({g for i in ids.values() if i is not None and (g := generation_of(i)) is not None}):
        locks.hold_generation_alone(conn, generation)
    wanted = sorted({i for i in ids.values() if i is not None})
    existing = (
        {r[0] for r in conn.execute(queries.load("guards/select_existing_mail_blobs"), {"ids": wanted})}
        if wanted
        else set()
    )
    yield Verdict(
        {key for key, blob_id in ids.items() if blob_id is not None and blob_id in existing}, layout.unreadable(ids)
    )


@contextmanager
def keep_thumbnails_with_a_master(_layout: KeyLayout, _conn, s3, bucket: str, keys: list[str]) -> Iterator[set[str]]:
    """Seed 004's guard: keep an orphan thumbnail whose master exists again (a profile slot uploaded anew
    since the check), by one listing per master prefix, just before the deletion."""
    by_master: dict[str, list[str]] = {}
    for key in keys:
        prefix = master_prefix_of_thumb(key)
        if prefix is not None:
            by_master.setdefault(prefix, []).append(key)
    yield Verdict({k for prefix, ks in by_master.items() if first_key(s3, bucket, prefix, "") is not None for k in ks})


# --------------------------------------------------------------------------------------- seed 000: blobs
# Any text id (docs/reference.md §3: app.blob.id is text): the fixed suffix makes the reading unique, `/` included.
BLOB_OBJECTS = KeyLayout(
    "app.blob",
    "blobs/",
    1,
    re.compile(r"blobs/(?P<id>.+)/(?:raw|thumbnail)", re.DOTALL),
    row_guard("app", "blob", "id"),
)


def blob_keys(blob_id: str) -> tuple[str, str]:
    """The objects a blob owns: its raw upload and its thumbnail (which the application may never have made)."""
    return f"blobs/{blob_id}/raw", f"blobs/{blob_id}/thumbnail"


# -------------------------------------------------------------------------------------- seed 002: pastes
# Any text content hash (seed 002's own example is `abc123`), not only a sha256 hex digest.
PASTE_CONTENTS = KeyLayout(
    "app.content", "pastes/", 1, re.compile(r"pastes/(?P<id>.+)", re.DOTALL), hold_unneeded_contents
)


def content_key(digest: str) -> str:
    """The object of a paste's content: `pastes/{content_hash}`."""
    return f"pastes/{digest}"


# -------------------------------------------------------------------------------------- seed 001: images
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


# ---------------------------------------------------------------------------------------- seed 003: mail
MAIL_BLOBS = KeyLayout("gen.blob", "mail/", 1, re.compile(r"mail/(?P<id>.+)", re.DOTALL), hold_unreferenced_mail)


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
THUMB = re.compile(
    rf"(?P<user>{USER})/thumbs/(?P<rev>\d{{6}})/(?P<stem>[0-9a-f]{{16}})_(?P<w>\d{{1,5}})"
    r"x(?P<h>\d{1,5})\.webp"
)
PROFILE_MASTER = re.compile(rf"(?P<user>{USER})/masters/(?P<slot>{SLOT})\.(?P<ext>{MEDIA_EXT})")
PROFILE_THUMB = re.compile(rf"(?P<user>{USER})/thumbs/(?P<slot>{SLOT})_(?P<w>\d{{1,5}})x(?P<h>\d{{1,5}})\.webp")
STAGING = re.compile(rf"staging/(?P<user>{USER})/(?P<uuid>{UUID})\.(?P<ext>{MEDIA_EXT})")
PROFILE_STAGING = re.compile(
    rf"profiles-staging/(?P<user>{USER})/(?P<slot>{SLOT})/(?P<uuid>{UUID})"
    rf"\.(?P<ext>{MEDIA_EXT})"
)
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
    when = when.astimezone(UTC)
    return when.year * 100 + when.month


def time8(when: datetime) -> str:
    """0xffffffff minus the milliseconds since the start of `when`'s month (UTC), as 8 hex digits."""
    when = when.astimezone(UTC)
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
LAYOUTS: dict[str, KeyLayout] = {
    layout.source: layout
    for layout in (BLOB_OBJECTS, PASTE_CONTENTS, IMAGE_FILES, MAIL_BLOBS, MEDIA_THUMBNAILS, MEDIA_STAGING)
}
# the bucket-wide layouts reconcile lists and checks against their tables, in listing order
RECONCILED = (BLOB_OBJECTS, PASTE_CONTENTS, IMAGE_FILES, MAIL_BLOBS)


def layout(source: str, *, default_bucket: str = "blobgc") -> KeyLayout | None:
    """The layout registered for a deletion-log source, or None (a source blobgc does not know).

    A collection's source (`collection:<name>`) has a layout made from the collections file when asked
    for, read with the deployment's `default_bucket` (Variable blobgc_bucket): its guard is
    `keep_keys_of_collection_rows`.
    """
    if source.startswith(collections.COLLECTION_SOURCE):
        return KeyLayout(source, "", 0, NO_KEY, collection_guard(default_bucket))
    return LAYOUTS.get(source)


NO_KEY = re.compile(r"(?!)")  # a collection's keys are read by its templates, not one pattern


def seed_prefixes(conn: psycopg.Connection, default_bucket: str) -> list[tuple[str, str, str]]:
    """(bucket, prefix, table) of every seed layout whose table this database has: blobgc's own there."""
    missing = set(missing_tables(conn, [layout.source for layout in RECONCILED]))
    return [(default_bucket, layout.prefix, layout.source) for layout in RECONCILED if layout.source not in missing]


def load_checked_collections(conn: psycopg.Connection, *, default_bucket: str) -> dict[str, collections.Collection]:
    """The collections file, checked for shape and for prefixes: per bucket, against each other and against every
    seed layout whose table exists (a collection may not take over blobgc's own `pastes/`, say)."""
    declared = collections.load_collections(default_bucket=default_bucket)
    collections.check_prefixes(
        declared,
        source=collections.file_named(),
        default_bucket=default_bucket,
        reserved=seed_prefixes(conn, default_bucket),
    )
    return declared


def collection_guard(default_bucket: str) -> Guard:
    """`keep_keys_of_collection_rows`, reading the collections file with the deployment's default bucket."""

    def guard(
        layout: KeyLayout, conn: psycopg.Connection, s3, bucket: str, keys: list[str]
    ) -> AbstractContextManager[Verdict]:
        return keep_keys_of_collection_rows(layout, conn, s3, bucket, keys, default_bucket=default_bucket)

    return guard


@contextmanager
def keep_keys_of_collection_rows(
    layout: KeyLayout, conn: psycopg.Connection, _s3, bucket: str, keys: list[str], *, default_bucket: str
) -> Iterator[Verdict]:
    """A collection's guard: keep every key some row of the collection forms now, exactly (content-addressed keys
    such as `up/{sha}.{ext}` are formed again when the same content is uploaded anew, or by another row that
    shares them).

    A key no current template can have formed, a collection the file no longer declares or keeps in another bucket
    now, or a file that does not check leaves its keys owed, parked with the reason (shown on the reclaim page),
    and the rest of the drain goes on: nothing is deleted that blobgc cannot judge. A database error while judging
    (a statement timeout, say) rolls back only the guard's savepoint and leaves the keys owed for the next drain.
    """
    try:
        with conn.transaction():  # a savepoint: the guard takes no lock, so nothing it held ends with it
            verdict = judge_collection_keys(conn, layout.source, bucket, keys, default_bucket)
    except psycopg.Error as error:
        log.warning(
            "could not judge %d owed keys of %s (%s): they stay owed for the next drain",
            len(keys),
            layout.source,
            error,
        )
        verdict = Verdict(stay_owed={key: f"could not be judged: {error}"[:500] for key in keys}, park=False)
    yield verdict


def judge_collection_keys(
    conn: psycopg.Connection, source: str, bucket: str, keys: list[str], default_bucket: str
) -> Verdict:
    """`keep_keys_of_collection_rows`'s verdict (see there)."""
    name = source[len(collections.COLLECTION_SOURCE) :]
    try:
        declared = load_checked_collections(conn, default_bucket=default_bucket)
    except collections.CollectionsError as error:
        return Verdict(stay_owed={key: f"the collections file does not check: {error}" for key in keys})
    if name not in declared:
        return Verdict(
            stay_owed={
                key: f"collection {name!r} is no longer declared in the "
                f"{collections.file_named()}: its owed keys stay owed until it is "
                "declared again (or an operator deletes them)"
                for key in keys
            }
        )
    if declared[name].bucket_or(default_bucket) != bucket:
        return Verdict(
            stay_owed={
                key: f"collection {name!r} keeps its objects in bucket "
                f"{declared[name].bucket_or(default_bucket)!r} now, not in {bucket!r} where "
                "this key was owed: its rows cannot judge it"
                for key in keys
            }
        )
    try:
        bound = collections.bind(conn, declared[name], default_bucket=default_bucket)
    except collections.CollectionsError as error:
        return Verdict(stay_owed={key: str(error) for key in keys})
    accounted, unshaped = collections.accounted_keys(conn, bound, keys)
    return Verdict(
        accounted,
        {
            key: f"the key fits none of collection {name!r}'s key templates now "
            f"({', '.join(bound.collection.keys)}): the file changed since it was owed?"
            for key in unshaped
        },
    )
