"""The Airflow layer's backstop for errors no retry can fix: each named with the deployment's own settings.

A task that meets a missing bucket, a bucket that refuses blobgc, a missing grant or a missing table
fails at once, without retries (`blobgc.dag_kit.steps.failing_fast`), with a message that names the
thing, what points at it (a Variable, a collection of the collections file, a DAG) and what to do.
Where a step knows the bucket itself it raises the refusal at the call site
(`blobgc.core.refusals.naming_bucket`); this reads the rest from the error. Anything else, a transient
S3 or database failure above all, is left for Airflow to retry.
"""

from __future__ import annotations

import logging

import psycopg
from botocore.exceptions import ClientError

from blobgc.core import registry
from blobgc.core.collections import Collection, collections_path, load_collections
from blobgc.core.outbox import DrainResult
from blobgc.core.refusals import (
    MEDIA_BUCKET_VARIABLE,
    bucket_refusal,
    collection_origin,
    missing_object_refusal,
    privilege_refusal,
    run_bucket_origin,
    source_origin,
)
from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.connections import PG_CONN_ID
from blobgc.dag_kit.variables import blob_bucket, blob_bucket_origin, media_settings

log = logging.getLogger(__name__)

UNDEFINED = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.UndefinedObject,
    psycopg.errors.InvalidSchemaName,
)


def unfixable(error: BaseException) -> ConfigurationError | None:
    """The refusal `error` means, named with the deployment's settings, or None when a retry may get past it."""
    try:
        if isinstance(error, ClientError):
            bucket = error.response.get("Error", {}).get("BucketName")
            return bucket_refusal(error, bucket, bucket_origin(bucket) if bucket else None)
        if isinstance(error, psycopg.errors.InsufficientPrivilege):
            return privilege_refusal(
                error,
                pg_role(),
                collection_tables=[c.table for c in declared()],
                seed_tables=registry.kind_tables(),
            )
        if isinstance(error, UNDEFINED):
            return missing_object_refusal(error, needed_by=needed_by())
    except Exception as failure:  # noqa: BLE001 - naming the error must never hide it
        log.warning("could not name what %s means (%s): it is raised as it is", type(error).__name__, failure)
    return None


def drain_refusal(result: DrainResult) -> ConfigurationError | None:
    """The first bucket a drain found missing or refusing blobgc, named with what points at it (None when none)."""
    for bucket, (source, error) in result.refused.items():
        refusal = bucket_refusal(error, bucket, bucket_origin(bucket, source))
        if refusal is not None:
            return refusal
    return None


def bucket_origin(bucket: str, source: str | None = None) -> str:
    """What points blobgc at `bucket`: Variable blobgc_bucket, collections of the file, seed 004's prefix Variable;
    else what the deletion-log `source` says (or nothing known)."""
    try:
        run_bucket = blob_bucket()
    except ConfigurationError:
        run_bucket = None
    collections = declared()
    found = [run_bucket_origin(blob_bucket_origin(), collections=collections)] if bucket == run_bucket else []
    found += [collection_origin(c) for c in collections if c.bucket == bucket]
    try:
        media = media_settings()
        if bucket in (media.images_bucket, media.profiles_bucket):
            found.append(f"{MEDIA_BUCKET_VARIABLE} {media.bucket_prefix!r}")
    except ConfigurationError:
        pass
    if not found and source:
        found.append(source_origin(source))
    return "; ".join(found) or "nothing in blobgc's settings names it"


def declared() -> list[Collection]:
    """The collections file's collections, or none when it does not load."""
    try:
        return list(load_collections(default_bucket=blob_bucket()).values())
    except ConfigurationError:
        return []


def needed_by() -> dict[str, list[str]]:
    """Table or column -> what names it: collections of the file, and the kinds' DAGs."""
    found: dict[str, list[str]] = {}
    for collection in declared():
        where = f"collection {collection.name!r} of collections file {collections_path()}"
        for name in {collection.table, *collection.columns}:
            found.setdefault(name, []).append(where)
        for query in collection.references:
            for word in query.replace(",", " ").split():
                if "." in word:
                    found.setdefault(word.strip('"();'), []).append(f"{where}, in a `references` query")
    for kind in registry.REGISTRY.installed():
        for dag_id, needs in kind.dags.items():
            for table in needs.tables:
                found.setdefault(table, []).append(f"DAG {dag_id} ({needs.what})")
    return found


def pg_role() -> str:
    """The role blobgc connects as (connection blobgc_postgres's login), for a GRANT statement."""
    try:
        from airflow.sdk import Connection

        return Connection.get(PG_CONN_ID).login or "<blobgc's role>"
    except Exception:  # noqa: BLE001 - a connection that does not load names no role
        return "<blobgc's role>"
