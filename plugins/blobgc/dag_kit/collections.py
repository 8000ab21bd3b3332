"""The collections a run works on (docs/reference.md §6): the file, the Param `collections`, and each one's references.

A DAG that reads the collections file checks it in its first task (`checked_collections`): the
file's shape, the Param's names, and every selected collection against the live catalog, including
its references. A bad file fails that task, without retries, naming the collection and the field,
before anything is written. Each mapped task then binds its own collection again (`one_collection`),
so it works from the catalog as it is when the task runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import psycopg

from blobgc.core.collections import (
    BoundCollection,
    bind,
    file_named,
    load_collections,
    select,
    warn_slash_values,
    warn_unindexed,
)
from blobgc.core.keys import load_checked_collections
from blobgc.core.quarantine import VARIABLE as QUARANTINE_VARIABLE
from blobgc.core.quarantine import QuarantinePolicy, parse_days
from blobgc.core.references import ReferenceSet, UnfollowableReference, discover_references
from blobgc.core.refusals import check_buckets, collection_bucket_origins
from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.connections import S3_CONN_ID, StoreByBucket, store_client
from blobgc.dag_kit.variables import blob_bucket, extra_blob_references, media_settings, variable

log = logging.getLogger(__name__)

BUCKET_CONNECTIONS = "blobgc_bucket_connections"


def collections_param() -> Any:
    """Param `collections`: the collections a run works on, by name (null or empty: every one in the file)."""
    from airflow.sdk import Param

    return Param(
        None,
        type=["null", "array"],
        items={"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        description="Work on these collections of the collections file only (default: all of them).",
    )


def checked_collections(
    conn: psycopg.Connection, params: Mapping[str, Any], *, index_warnings: bool = False
) -> list[BoundCollection]:
    """The collections the run's Param selects, each checked against the catalog with its references."""
    bucket = blob_bucket()
    found = []
    for collection in select(load_checked_collections(conn, default_bucket=bucket), params.get("collections")):
        bound = bind(conn, collection, default_bucket=bucket)
        references(conn, bound)
        warn_slash_values(bound)
        if index_warnings:
            warn_unindexed(conn, bound)
        found.append(bound)
    return found


def one_collection(conn: psycopg.Connection, name: str) -> BoundCollection:
    """One collection of the file, checked against the catalog now."""
    bucket = blob_bucket()
    return bind(conn, select(load_checked_collections(conn, default_bucket=bucket), [name])[0], default_bucket=bucket)


def references(conn: psycopg.Connection, bound: BoundCollection) -> ReferenceSet:
    """Every reference to the collection's rows: its foreign keys, its `references` queries, and for a column-mode
    collection (seed 000's app_blob) also Variable blobgc_extra_blob_references (as before collections existed)."""
    c = bound.collection
    extra = list(c.references) + (extra_blob_references() if c.reserved_by_a_kind else [])
    try:
        return discover_references(conn, c.table, extra_sql=extra, id_column=c.id)
    except UnfollowableReference as error:
        raise UnfollowableReference(f"{file_named()}: collection {c.name!r} ({c.table}): {error}") from error


def stores_by_bucket(default):
    """`default` (the client of `blobgc_s3`), or a `StoreByBucket` when a bucket is reached through another
    connection: a collection's `conn_id`, or Variable blobgc_bucket_connections (bucket -> conn_id). Each
    connection's type picks its store (`store_client`). Already routed, it is returned as is.

    The seed kinds' buckets (Variable blobgc_bucket, seed 004's two) are `blobgc_s3`'s unless the Variable names
    another connection for them; a collection that keeps its objects in one of them through another connection, or
    any bucket named with two connections, fails the task, naming both. With the collections file unusable, its
    collections' connections are unknown: their buckets are refused (`StoreUnknown`, so their owed objects stay
    owed) rather than guessed to be `blobgc_s3`'s, where a same-named bucket could answer for them.
    """
    if isinstance(default, StoreByBucket):
        return default
    named = bucket_connections()
    own = dict(named)
    for bucket in seed_buckets():
        own.setdefault(bucket, S3_CONN_ID)
    default_bucket = blob_bucket()
    try:
        declared = load_collections(default_bucket=default_bucket)
    except ConfigurationError as error:
        log.warning("collections file unusable (%s): the buckets of its collections are not reached", error)
        return routed(default, own, unknown=f"the collections file is unusable ({error})")
    for c in declared.values():
        bucket = c.bucket_or(default_bucket)
        if own.setdefault(bucket, c.conn_id) != c.conn_id:
            by = (
                f"Variable {BUCKET_CONNECTIONS}"
                if bucket in named
                else f"blobgc's own kinds (their bucket is {S3_CONN_ID}'s unless Variable {BUCKET_CONNECTIONS} "
                "names another)"
            )
            raise ConfigurationError(
                f"bucket {bucket!r} is reached through {c.conn_id!r} by collection {c.name!r} and through "
                f"{own[bucket]!r} by {by}; one bucket name has one connection"
            )
    return routed(default, own)


def routed(default, own: dict[str, str], *, unknown: str | None = None):
    """`default`, or a `StoreByBucket` sending each bucket of `own` (bucket -> conn_id) to its connection's store;
    with `unknown`, a bucket not in `own` is refused (StoreUnknown) rather than sent to `default`."""
    others = {bucket: conn_id for bucket, conn_id in own.items() if conn_id != S3_CONN_ID}
    if not others and unknown is None:
        return default
    clients = {conn_id: store_client(conn_id) for conn_id in set(others.values())}  # one client per connection
    return StoreByBucket(
        default,
        {bucket: clients[conn_id] for bucket, conn_id in others.items()},
        known=frozenset(own),
        unknown=unknown,
    )


def seed_buckets() -> list[str]:
    """The buckets of blobgc's own kinds: Variable blobgc_bucket's (seeds 000-003) and seed 004's two (unless its
    Variables do not parse: that fails seed 004's own DAGs, not every DAG that reaches a store)."""
    try:
        media = media_settings()
    except ConfigurationError:
        return [blob_bucket()]
    return [blob_bucket(), media.images_bucket, media.profiles_bucket]


def bucket_connections() -> dict[str, str]:
    """Variable blobgc_bucket_connections: bucket (or container) -> the connection of its store, for buckets that
    no collection names (the seed kinds' `blobgc_bucket`); a malformed value fails the task, naming it."""
    value = variable(BUCKET_CONNECTIONS, {}, json_value=True)
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigurationError(
            f"Variable {BUCKET_CONNECTIONS} must be a JSON object of bucket -> connection id, e.g. "
            f'{{"blobgc": "blobgc_gcs"}}; got {value!r}'
        )
    return dict(value)


def quarantine_policy() -> QuarantinePolicy:
    """How long deleted objects wait in quarantine: each collection's `quarantine_days` and Variable
    blobgc_quarantine (kind or bucket -> days). With a file that does not load, the collections' days are unknown:
    their owed objects stay owed (`QuarantineUnknown`) while the kinds' own drain; a bad Variable fails the task."""
    by_name = parse_days(variable(QUARANTINE_VARIABLE, None))
    try:
        declared = load_collections(default_bucket=blob_bucket())
    except ConfigurationError as error:
        log.warning(
            "collections file unusable (%s): the collections' owed objects stay owed (their quarantine_days are "
            "unknown); the kinds' own are drained with Variable %s",
            error,
            QUARANTINE_VARIABLE,
        )
        return QuarantinePolicy(by_name, {}, collections_unknown=str(error))
    return QuarantinePolicy(by_name, {c.name: c.quarantine_days for c in declared.values() if c.quarantine_days})


def check_collection_buckets(default_s3, collections: list[BoundCollection]) -> None:
    """A deleting DAG's first-task probe of each selected collection's bucket (one listing call of one key): a
    missing one fails the task at once, named with its collection; one these credentials may not list is left
    to the drain, with a warning (a step that only deletes may hold s3:DeleteObject without s3:ListBucket)."""
    check_buckets(
        stores_by_bucket(default_s3), collection_bucket_origins(collections, blob_bucket()), listing_needed=False
    )


class FileCollections:
    """The collections file and Airflow's settings, as the collectors of collections read them
    (`blobgc.core.collections.CollectionSource`)."""

    def bucket(self) -> str:
        return blob_bucket()

    def checked(
        self, conn: psycopg.Connection, params: Mapping[str, Any], *, index_warnings: bool = False
    ) -> list[BoundCollection]:
        return checked_collections(conn, params, index_warnings=index_warnings)

    def one(self, conn: psycopg.Connection, name: str) -> BoundCollection:
        return one_collection(conn, name)

    def references(self, conn: psycopg.Connection, bound: BoundCollection) -> ReferenceSet:
        return references(conn, bound)

    def store(self, default: Any) -> Any:
        return stores_by_bucket(default)

    def check_buckets(self, default: Any, collections: list[BoundCollection]) -> None:
        check_collection_buckets(default, collections)


FILE = FileCollections()
