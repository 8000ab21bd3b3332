"""Key layouts: how an object's key is formed, read back, sharded and guarded, and the registry of every kind's.

Every family of objects blobgc deletes has one `KeyLayout`, declared in the folder of the kind of collector
that owns it (`blobgc/kinds/<kind>/layouts.py`) and registered under its deletion-log *source* (the table,
or store, that accounts for its keys) when `blobgc.kinds` installs the kinds. A layout

- formats keys from a row (the functions beside it in the kind's folder);
- parses a key back into the identity of the row that accounts for it (`KeyLayout.identity`);
- names its literal prefix, which reconcile lists, and its shards (the prefix plus `shard_chars`);
- names the guard that decides at drain time whether an owed key is still accounted for.

This module knows no kind: it holds the machinery (`KeyLayout`, `Verdict`, `row_guard`, `KeySource`) and the
registry the outbox and reconcile ask (`layout`, `reconciled_sources`), which raises until the kinds are
installed, so no drain ever deletes a key without its guard.

**Guards.** The outbox calls a layout's guard inside the draining transaction, just before the
delete: it returns a `Verdict`, the keys a row (or a master object) accounts for again, which are
kept, and the keys it cannot judge (a key that fits no layout now), which stay owed with the reason,
parked; it holds the rest, by a lock or an uncommitted row, until the transaction ends.

**Every value a column can hold.** A kind's pattern reads back every key its key function forms from any
text value (a `/`, a `.` or an upper-case letter included): each has one placeholder between fixed literals,
so a key has exactly one reading and the row it names is the only row that can form it. A collection's
templates may have several placeholders and several readings; whether a row forms a key is then decided in
SQL (`blobgc.core.collections.accounted_keys`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql as pgsql

from blobgc.core import collections, queries
from blobgc.core.catalog import missing_tables
from blobgc.core.objects import ObjectStore

log = logging.getLogger(__name__)


@dataclass
class Verdict:
    """A guard's answer: the owed keys to keep (a row needs them again), and those that stay owed, with why."""

    keep: set[str] = field(default_factory=set)
    stay_owed: dict[str, str] = field(default_factory=dict)
    park: bool = True  # the keys that stay owed are parked at once (False: a drain tries them again)


# A guard: (its layout, the draining connection, the object store, the bucket, the owed keys) -> a context that
# yields its Verdict and holds the other keys until the draining transaction ends.
Guard = Callable[["KeyLayout", psycopg.Connection, ObjectStore, str, list[str]], AbstractContextManager[Verdict]]


class KeyLayoutError(ValueError):
    """A value that does not fit a key layout (a month that is not a month, a key that is not a master)."""


@dataclass(frozen=True)
class KeyLayout:
    """One family of keys: its deletion-log source, prefix, shards, whole-key pattern and guard."""

    source: str  # what accounts for the keys: a table ("schema.table"), or a store without one ("<store>.<kind>")
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

    def hold(
        self, conn: psycopg.Connection, s3: ObjectStore, bucket: str, keys: list[str]
    ) -> AbstractContextManager[Verdict]:
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
        layout: KeyLayout, conn: psycopg.Connection, _s3: Any, _bucket: str, keys: list[str]
    ) -> Iterator[Verdict]:
        ids = {key: layout.identity(key) for key in keys}
        wanted = sorted({i for i in ids.values() if i is not None})
        existing = {r[0] for r in conn.execute(query, {"ids": wanted})} if wanted else set()
        yield Verdict(
            {key for key, identity in ids.items() if identity is not None and identity in existing},
            layout.unreadable(ids),
        )

    return keep_keys_with_a_row


# --------------------------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class KeySource:
    """A bucket-wide key layout that reconcile lists, and the statements that ask its table which keys a row
    accounts for (named statements of the kind's package: `blobgc.core.queries.Statement`)."""

    layout: KeyLayout
    existing_query: queries.Statement  # ids among %(refs)s that have a row
    rows_query: queries.Statement  # (id, known keys or NULL) of rows in an id range of a shard
    required_keys: Callable[[str, list[str] | None], list[str]]  # the keys a row must have
    shards_query: queries.Statement  # the shards (after the prefix) that rows fall in
    keys_query: queries.Statement  # (key, whether it must exist) of every row: the layout's keys formed in SQL

    @property
    def name(self) -> str:
        return self.layout.source

    @property
    def prefix(self) -> str:
        return self.layout.prefix

    def ref_prefix(self, shard_prefix: str) -> str:
        """The id prefix of a shard's rows ("images/3f/" -> "3f", "blobs/a" -> "a")."""
        return shard_prefix[len(self.prefix) :].rstrip("/")


@dataclass
class Installed:
    """The layouts of every installed kind (`blobgc.core.registry.install`), by deletion-log source."""

    layouts: dict[str, KeyLayout] = field(default_factory=dict)
    reconciled: tuple[KeySource, ...] = ()  # in listing order

    def check(self) -> Installed:
        collections.INSTALLATION.check()
        return self


INSTALLED = Installed()


def install_layouts(layouts: Iterable[KeyLayout], reconciled: Iterable[KeySource]) -> None:
    """Register every kind's layouts at once (`blobgc.core.registry.install` calls it); a source registered twice
    is refused: exactly one layout, and one guard, judges a source's keys."""
    by_source: dict[str, KeyLayout] = {}
    for one in layouts:
        if one.source in by_source:
            raise ValueError(f"two key layouts are registered for the source {one.source!r}")
        by_source[one.source] = one
    INSTALLED.layouts, INSTALLED.reconciled = by_source, tuple(reconciled)


def reconciled_sources() -> tuple[KeySource, ...]:
    """The bucket-wide key sources reconcile lists and checks against their tables, in listing order."""
    return INSTALLED.check().reconciled


def layout(source: str, *, default_bucket: str = "blobgc") -> KeyLayout | None:
    """The layout registered for a deletion-log source, or None (a source no installed kind knows).

    A collection's source (`collection:<name>`) has a layout made from the collections file when asked
    for, read with the deployment's `default_bucket` (Variable blobgc_bucket): its guard is
    `keep_keys_of_collection_rows`.
    """
    installed = INSTALLED.check()
    if source.startswith(collections.COLLECTION_SOURCE):
        return KeyLayout(source, "", 0, NO_KEY, collection_guard(default_bucket))
    return installed.layouts.get(source)


NO_KEY = re.compile(r"(?!)")  # a collection's keys are read by its templates, not one pattern


def seed_prefixes(conn: psycopg.Connection, default_bucket: str) -> list[tuple[str, str, str]]:
    """(bucket, prefix, table) of every installed kind's bucket-wide layout whose table this database has."""
    sources = reconciled_sources()
    missing = set(missing_tables(conn, [s.name for s in sources]))
    return [(default_bucket, s.prefix, s.name) for s in sources if s.name not in missing]


def load_checked_collections(conn: psycopg.Connection, *, default_bucket: str) -> dict[str, collections.Collection]:
    """The collections file, checked for shape and for prefixes: per bucket, against each other and against every
    seed layout whose table exists (a collection may not take over a kind's own prefix)."""
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
        layout: KeyLayout, conn: psycopg.Connection, s3: ObjectStore, bucket: str, keys: list[str]
    ) -> AbstractContextManager[Verdict]:
        return keep_keys_of_collection_rows(layout, conn, s3, bucket, keys, default_bucket=default_bucket)

    return guard


@contextmanager
def keep_keys_of_collection_rows(
    layout: KeyLayout, conn: psycopg.Connection, _s3: Any, bucket: str, keys: list[str], *, default_bucket: str
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
