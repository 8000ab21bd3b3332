"""Errors no retry can fix, named: a bucket that is missing or refuses blobgc, a grant the role lacks, a table,
column or function the database does not have.

Each is a ConfigurationError, which the Airflow layer turns into a task failure without retries, and its
message names the thing and says what to do. Where a caller knows the bucket and what points at it (a
collection, Variable blobgc_bucket), it raises one itself (`naming_bucket`, `check_bucket`); the Airflow
layer's backstop reads the rest from the error (`blobgc.dag_kit.unfixable`). A transient failure
(throttling, a 5xx, a dropped connection) is never one of these: Airflow retries it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psycopg
from botocore.exceptions import ClientError

from blobgc.core.collections import (
    COLLECTION_SOURCE,
    BoundCollection,
    Collection,
    collections_path,
    column_mode_of_source,
)
from blobgc.core.objects import ObjectStore, error_code, is_transient
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

RUN_BUCKET_VARIABLE = "Variable blobgc_bucket"
MEDIA_BUCKET_VARIABLE = "Variable blobgc_media_bucket_prefix"
MISSING_BUCKET_CODES = frozenset({"NoSuchBucket"})
DENIED_CODES = frozenset({"AccessDenied", "AllAccessDisabled"})
# The IAM action each S3 call blobgc makes needs (what to grant when the store answers 403).
S3_ACTIONS = {
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "HeadBucket": "s3:ListBucket",
    "ListObjectVersions": "s3:ListBucketVersions",
    "GetBucketVersioning": "s3:GetBucketVersioning",
    "DeleteObjects": "s3:DeleteObject",
    "DeleteObject": "s3:DeleteObject",
    "HeadObject": "s3:GetObject",
    "GetObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CopyObject": "s3:GetObject and s3:PutObject",
}
BUCKET_ACTIONS = frozenset({"s3:ListBucket", "s3:ListBucketVersions", "s3:GetBucketVersioning"})


class MissingBucket(ConfigurationError):
    """A bucket that blobgc is pointed at does not exist."""


class BucketAccessDenied(ConfigurationError):
    """The store refuses blobgc's credentials an action on a bucket (403)."""


class MissingPrivilege(ConfigurationError):
    """The database role blobgc connects as lacks a privilege."""


class MissingDatabaseObject(ConfigurationError):
    """A table, column or function a query names does not exist in the database."""


# ------------------------------------------------------------------------------------------------ buckets
def collection_origin(collection: Collection) -> str:
    """How a refusal names a collection as what points at a bucket."""
    where = f"collection {collection.name!r}, collections file {collections_path()}"
    return where if collection.bucket else f"{where}, which names no bucket for it: {RUN_BUCKET_VARIABLE}"


def run_bucket_origin(
    variable: str = RUN_BUCKET_VARIABLE, *, seed_tables: Iterable[str] = (), collections: Iterable[Collection] = ()
) -> str:
    """How a refusal names Variable blobgc_bucket (`variable`) as what points at a bucket, and what uses it: the seed
    tables whose layouts are there, the collections the file names no bucket for."""
    tables, names = list(seed_tables), [repr(c.name) for c in collections if not c.bucket]
    uses = [f"the seed tables {', '.join(tables)}"] if tables else []
    if names:
        uses.append(
            f"collection{'s' if len(names) > 1 else ''} {', '.join(names)}, for which collections file "
            f"{collections_path()} names no bucket"
        )
    return f"{variable}, for {' and '.join(uses)}" if uses else variable


def source_origin(source: str) -> str:
    """What points at the bucket of a deletion-log source, read from the source's name alone."""
    if source.startswith(COLLECTION_SOURCE):
        return f"collection {source[len(COLLECTION_SOURCE) :]!r}, collections file {collections_path()}"
    if source.startswith("media."):
        return MEDIA_BUCKET_VARIABLE
    if (mode := column_mode_of_source(source)) is not None:
        name = mode.collection.name
        return f"{RUN_BUCKET_VARIABLE}, or collection {name!r}'s bucket in collections file {collections_path()}"
    return RUN_BUCKET_VARIABLE


def bucket_refusal(
    error: BaseException, bucket: str | None = None, origin: str | None = None
) -> ConfigurationError | None:
    """The refusal a store's answer means, naming the bucket and what points at it; None for any other error
    (a transient one above all, which a retry may get past)."""
    if not isinstance(error, ClientError) or is_transient(error):
        return None
    code = error_code(error)
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    bucket = bucket or error.response.get("Error", {}).get("BucketName") or None
    operation = error.operation_name or "the request"
    named = f"bucket {bucket!r}" if bucket else "the bucket"
    pointer = f" ({origin})" if origin else ""
    if code in MISSING_BUCKET_CODES or (code == "404" and operation == "HeadBucket"):
        return MissingBucket(
            f"{named}{pointer} does not exist (the store answered {code} to {operation}): create "
            f"it, or {what_to_change(origin)}. No retry can fix this, so the task fails at once."
        )
    if code in DENIED_CODES or (status == 403 and code == "403"):
        action = S3_ACTIONS.get(operation, f"the action {operation} needs")
        resource = f"arn:aws:s3:::{bucket or '<bucket>'}" + ("" if action in BUCKET_ACTIONS else "/*")
        return BucketAccessDenied(
            f"access denied to {named}{pointer}: the store refused {operation} ({code}). Grant the credentials of "
            f"blobgc's S3 connection {action} on {resource} (or lift the bucket policy's Deny). No retry can fix "
            "this, so the task fails at once."
        )
    return None


def what_to_change(origin: str | None) -> str:
    """What to set so that blobgc looks in the bucket that holds the objects, for each of `origin`'s pointers."""
    changes: list[str] = []
    for part in (origin or "").split("; "):
        if match := re.match(r"collection ('[^']+'), collections file (.+?)(, which names no bucket|$)", part):
            changes.append(f"set the `bucket` of collection {match.group(1)} in collections file {match.group(2)}")
        if match := re.search(r"(Variable \w+)", part):
            changes.append(f"set {match.group(1)}")
    return (
        " or ".join(dict.fromkeys(changes)) + " to the bucket that holds the objects"
        if changes
        else "point blobgc at the bucket that holds the objects"
    )


@contextmanager
def naming_bucket(bucket: str, origin: str) -> Iterator[None]:
    """Inside, a store's refusal on `bucket` (missing, access denied) is raised as a refusal naming the bucket and
    `origin`, what points at it; every other error passes unchanged."""
    try:
        yield
    except ClientError as error:
        refusal = bucket_refusal(error, bucket, origin)
        if refusal is None:
            raise
        raise refusal from error


def check_bucket(s3: ObjectStore, bucket: str, origin: str, *, listing_needed: bool = True) -> None:
    """Fail at once, naming `bucket` and `origin`, when the bucket is missing or may not be listed: one listing
    call of one key. Without `listing_needed` (a step that only deletes: its credentials may delete without
    listing), a bucket that refuses the listing is not probed further, with a warning, and only a missing one
    fails."""
    try:
        with naming_bucket(bucket, origin):
            s3.list_objects_v2(Bucket=bucket, MaxKeys=1)
    except BucketAccessDenied as denied:
        if listing_needed:
            raise
        log.warning("bucket %r could not be probed (%s); the drain names any deletion it refuses", bucket, denied)


def collection_bucket_origins(collections: Iterable[BoundCollection], run_bucket: str) -> dict[str, list[str]]:
    """The bucket of each bound collection (`BoundCollection`), with what points at it: the collection, or Variable
    blobgc_bucket for one the file names no bucket for."""
    origins: dict[str, list[str]] = {}
    for bound in collections:
        origin = (
            collection_origin(bound.collection)
            if bound.collection.bucket or bound.bucket != run_bucket
            else run_bucket_origin(collections=[bound.collection])
        )
        origins.setdefault(bound.bucket, []).append(origin)
    return origins


def check_buckets(s3: ObjectStore, origins: dict[str, list[str]], *, listing_needed: bool = True) -> None:
    """`check_bucket` for every bucket something points at (bucket -> what points at it)."""
    for bucket, pointers in origins.items():
        check_bucket(s3, bucket, "; ".join(pointers), listing_needed=listing_needed)


# ------------------------------------------------------------------------------------------------ database
def quoted_role(role: str) -> str:
    """A role name as a GRANT statement spells it."""
    return role if re.fullmatch(r"[a-z_][a-z0-9_$]*", role) else '"' + role.replace('"', '""') + '"'


def privilege_refusal(
    error: psycopg.errors.InsufficientPrivilege,
    role: str,
    *,
    collection_tables: Iterable[str] = (),
    seed_tables: Iterable[str] = (),
) -> MissingPrivilege:
    """What a "permission denied" means to grant: the object named from the error's text, and the GRANT statement.

    `collection_tables` and `seed_tables` (schema-qualified) qualify a bare table name (PostgreSQL names the table
    alone) and say what blobgc does with it: a blob table's rows are read, claimed FOR UPDATE and deleted; any
    other table is only read (a reference)."""
    text = error.diag.message_primary or str(error).splitlines()[0]
    grantee = quoted_role(role)
    after = (
        "No retry can fix this, so the task fails at once: grant it (the README's least-privilege GRANT block "
        "lists every grant blobgc needs)."
    )
    if match := re.fullmatch(
        r"permission denied for (schema|table|relation|view|sequence|function|procedure|"
        r'database) "?(.+?)"?',
        text,
    ):
        kind, name = match.group(1), match.group(2)
        if kind == "schema":
            grant = "USAGE, CREATE" if name == "blobgc" else "USAGE"
            return MissingPrivilege(
                f"{text}: role {grantee} may not use schema {name}. {after} "
                f"GRANT {grant} ON SCHEMA {name} TO {grantee};"
            )
        if kind == "database":
            return MissingPrivilege(
                f"{text}: role {grantee} may not create schema blobgc in database {name}. {after} "
                f"GRANT CREATE ON DATABASE {name} TO {grantee}; (or let a DBA create schema "
                f"blobgc and GRANT USAGE, CREATE ON SCHEMA blobgc TO {grantee};)"
            )
        if kind == "sequence":
            return MissingPrivilege(f"{text}. {after} GRANT USAGE, SELECT ON SEQUENCE {name} TO {grantee};")
        if kind in ("function", "procedure"):
            return MissingPrivilege(f"{text}. {after} GRANT EXECUTE ON {kind.upper()} {name} TO {grantee};")
        qualified = qualify(name, [*collection_tables, *seed_tables, "blobgc." + name])
        if qualified.startswith("blobgc."):
            grant = f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA blobgc TO {grantee};"
        elif qualified in set(collection_tables) or qualified in set(seed_tables):
            grant = f"GRANT SELECT, UPDATE, DELETE ON {qualified} TO {grantee};"  # read, claim FOR UPDATE, delete
        else:
            grant = f"GRANT SELECT ON {qualified} TO {grantee};"  # a table that references blobs is only read
        return MissingPrivilege(f"{text}: role {grantee} lacks a privilege on table {qualified}. {after} {grant}")
    return MissingPrivilege(f"{text} (role {grantee}). {after}")


def qualify(name: str, known: Iterable[str]) -> str:
    """A bare table name as the schema-qualified one among `known` (the first whose table part is it), or as is."""
    if "." in name:
        return name
    return next((t for t in known if t.split(".", 1)[-1] == name), name)


def missing_object_refusal(
    error: psycopg.Error, *, needed_by: dict[str, list[str]] | None = None
) -> MissingDatabaseObject:
    """What an undefined table, column or function means: the thing named from the error's text, and who needs it.

    `needed_by` maps a table or column name to what names it (a collection of the collections file, a DAG)."""
    text = error.diag.message_primary or str(error).splitlines()[0]
    needed_by = needed_by or {}
    if match := re.fullmatch(r'relation "(.+)" does not exist', text):
        name = match.group(1)
        if name.startswith("blobgc."):
            return MissingDatabaseObject(
                f"table {name} does not exist: blobgc's schema is behind the code. Run "
                "`python -m blobgc.migrate --conn-id blobgc_postgres`. No retry can fix this."
            )
        who = needed_by.get(name) or needed_by.get(name.split(".", 1)[-1]) or []
        need = f", which {' and '.join(who)} needs" if who else ""
        fix = (
            "create it, or correct what names it (a collection's `table` or `references` queries), or pause the "
            "DAG that needs it"
            if who
            else "create it, or correct the query that names it"
        )
        return MissingDatabaseObject(
            f"table {name} does not exist in the database of connection blobgc_postgres"
            f"{need}. No retry can fix this: {fix}."
        )
    if match := re.fullmatch(r'column "?(.+?)"?( of relation "(.+)")? does not exist', text):
        column = match.group(1).split(".")[-1]
        who = needed_by.get(column) or []
        need = f", which {' and '.join(who)} names" if who else ""
        return MissingDatabaseObject(
            f"{text}{need}. No retry can fix this: add the column, or correct "
            f"{' and '.join(who) or 'the query that names it'} (a collection's id, created_at, size or key template "
            "placeholders, its `references` queries)."
        )
    return MissingDatabaseObject(
        f"{text}. No retry can fix this: create it (or the extension that provides it), or correct the query that "
        "calls it (a collection's `references` query, Variable blobgc_extra_blob_references)."
    )
