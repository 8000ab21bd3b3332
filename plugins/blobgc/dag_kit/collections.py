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
from blobgc.dag_kit.connections import S3_CONN_ID, S3ByBucket, s3_client
from blobgc.dag_kit.variables import blob_bucket, extra_blob_references, variable

log = logging.getLogger(__name__)


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


def s3_for_collections(default):
    """`default`, or an `S3ByBucket` when a collection of the file keeps its bucket behind another connection.

    A file that does not check is left to the steps that need it (their guard refuses); the default
    client is used here, with a warning.
    """
    try:
        declared = load_collections(default_bucket=blob_bucket())
    except ConfigurationError as error:
        log.warning("collections file unusable (%s): every bucket is reached through %s", error, S3_CONN_ID)
        return default
    own = {c.bucket: c.s3_conn_id for c in declared.values() if c.bucket and c.s3_conn_id != S3_CONN_ID}
    if not own:
        return default
    return S3ByBucket(default, {bucket: s3_client(conn_id) for bucket, conn_id in own.items()})


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
        s3_for_collections(default_s3), collection_bucket_origins(collections, blob_bucket()), listing_needed=False
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
        return s3_for_collections(default)

    def check_buckets(self, default: Any, collections: list[BoundCollection]) -> None:
        check_collection_buckets(default, collections)


FILE = FileCollections()
