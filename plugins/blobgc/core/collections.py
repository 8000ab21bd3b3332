"""Collections (docs/reference.md §6): any PostgreSQL table of blobs whose objects live in S3, declared in a YAML file.

The file is `$BLOBGC_COLLECTIONS`, or `$AIRFLOW_HOME/include/collections.yaml` when that is unset (run from a
checkout of this repository: the checkout's `include/collections.yaml`):

    collections:
      uploads:                          # name: [a-z][a-z0-9_]*, unique
        table: shop.upload              # schema-qualified; blobgc never alters it
        id: id                          # primary-key column (or a unique NOT NULL one), any type
        created_at: created_at          # optional: rows younger than the grace are never swept
        size: size_bytes                # optional: bytes of the first key's object, for the reclaim figures
        bucket: uploads                 # optional, default Variable blobgc_bucket
        conn_id: blobgc_s3              # optional, default blobgc_s3; its type picks the store (s3_conn_id: older name)
        keys: ["up/{sha}.{ext}"]        # one or more; each {placeholder} is a column of the row
        grace_hours: 24                 # optional, default 24
        quarantine_days: 0              # optional, default 0: days a deleted object waits in quarantine
        references:                     # optional: SELECTs of referenced ids that no foreign key declares
          - "SELECT upload_id FROM shop.legacy_ref"

Checking happens in two steps, and both name the collection and the field of anything wrong:

1. `load_collections` reads the file and checks its shape (pydantic): names, identifiers, templates
   (every placeholder a plain name, literal text before the first one and between any two: `{a}{b}`
   cannot be told apart), no two collections under overlapping prefixes of one bucket, no name twice.
   `blobgc.core.keys.load_checked_collections` also refuses a prefix that overlaps one of the installed
   kinds' bucket-wide layouts in the default bucket, where that layout's table exists.
2. `bind` checks a collection against the live catalog: the table and every named column exist, the
   id is the primary key or a unique NOT NULL column, the size is a number, every reference query
   runs and returns one column of ids. It returns a `BoundCollection`, which knows each column's type.

**A key is accounted for exactly when a row forms it.** A row forms a template's key in SQL
(`KeyTemplate.expression`: the literals and each column's `::text`; a NULL column forms no key), and
every decision compares keys with that: the sweep's owed keys, the drain's guard, listing reconcile
(`accounted_keys`) and the inventory anti-join (`rendered_keys`). A key's *readings* (every split of
it into the template's literals and values, a value holding any character, `/` included) only narrow
the look-up to rows whose first comparable column holds a value some reading gives it; they never
decide. A key with no reading whose values fit their columns' text forms (`text_form_of`: a bigint is
digits, a uuid is lower-case hex) is of no template's shape: reconcile reports it and never deletes it.

A collection a kind declares in *column mode* (`ColumnMode`: seed 000's app_blob, by the kind `blobs`) keeps
its mark state in its own table's columns, with the kind's own statements; every other collection keeps it in
blobgc's own table `blobgc.mark_<name>`, and no column is ever added to a user's table.
"""

from __future__ import annotations

import logging
import os
import re
import string
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Protocol

import psycopg
import yaml
from psycopg import sql
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from blobgc.core import queries
from blobgc.core.catalog import table_exists
from blobgc.core.key_space import IdColumn
from blobgc.core.references import ReferenceSet, check_extra_query
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

DEFAULT_S3_CONN_ID = "blobgc_s3"
DEFAULT_GRACE_HOURS = 24.0

IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
Identifier = Annotated[str, StringConstraints(pattern=rf"^{IDENTIFIER}$")]
# A collection's name also names its mark table (blobgc.mark_<name>), so it stays well under 63 characters.
Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,47}$")]
# The text forms PostgreSQL gives a value of these types (`value::text`), exactly: a placeholder of such a column can
# only read a value of this form back, so a candidate value outside it cannot be any row's (and casts without error).
INTEGER_RANGES = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
CANONICAL_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
NUMERIC_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?|NaN|-?Infinity")
NUMERIC_TYPE = re.compile(r"numeric(?:\(\d+(?:,\d+)?\))?")
# Character types: a candidate value is compared with the column itself (its index serves the look-up).
CHARACTER_TYPES = re.compile(r"text|character varying(?:\(\d+\))?|character(?:\(\d+\))?|citext|name")
MAX_READINGS = 64  # readings of one key by one template beyond which its look-up does not narrow by value
EXPECTED = {  # what a field that fails its pattern must look like
    "name": "is not a collection name: lower case letters, digits and _, starting with a letter, at most 48",
    "table": "is not a schema-qualified table name such as schema.table",
    "id": "is not a column name",
    "created_at": "is not a column name",
    "size": "is not a column name",
    "bucket": "is not a bucket (or Azure container) name: 3 to 63 lower-case letters, digits, '.', '-' and '_'",
}


class CollectionsError(ConfigurationError):
    """The collections file is missing, malformed, or does not match the database: nothing is deleted."""


def collections_path() -> Path:
    """$BLOBGC_COLLECTIONS, or else `include/collections.yaml` of the Airflow project.

    The project is the checkout blobgc runs from (plugins/blobgc/ beside include/), or else
    $AIRFLOW_HOME (the official image's and Astro's include/ lie there; Airflow's default ~/airflow when unset).
    """
    override = os.environ.get("BLOBGC_COLLECTIONS")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[3]
    if (checkout / "plugins" / "blobgc").is_dir():
        return checkout / "include" / "collections.yaml"
    return Path(os.environ.get("AIRFLOW_HOME") or "~/airflow").expanduser() / "include" / "collections.yaml"


def file_named(path: Path | None = None) -> str:
    """How an error names the collections file: by its path (`collections_path()` unless given)."""
    return f"collections file {path or collections_path()}"


# ---------------------------------------------------------------------------------------------- templates
@dataclass(frozen=True)
class KeyTemplate:
    """A key template such as `up/{sha}.{ext}`: its literal prefix, its placeholders, and how to read a key back."""

    text: str
    prefix: str  # the literal text before the first placeholder: what reconcile lists
    parts: tuple[tuple[str, str | None], ...]  # (literal text, the placeholder after it or None)

    @classmethod
    def parse_template(cls, text: str) -> KeyTemplate:
        parts: list[tuple[str, str | None]] = []
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as error:
            raise ValueError(f"{text!r} is not a key template: {error}") from error
        pending, previous = "", None  # literal text since the last placeholder (`{{` and `}}` arrive as pieces)
        for literal, name, spec, conversion in parsed:
            pending += literal
            if name is None:
                continue
            if not re.fullmatch(IDENTIFIER, name):
                raise ValueError(f"{text!r}: placeholder {{{name}}} must be a plain column name")
            if spec or conversion:
                raise ValueError(f"{text!r}: placeholder {{{name}}} may not have a format or conversion")
            if previous is not None and not pending:
                raise ValueError(
                    f"{text!r}: placeholders must be separated by literal text: "
                    f"{{{previous}}}{{{name}}} cannot be told apart in a key"
                )
            parts.append((pending, name))
            pending, previous = "", name
        parts.append((pending, None))  # the literal that closes the key (empty after a last placeholder)
        names = [n for _, n in parts if n is not None]
        if not names:
            raise ValueError(f"{text!r} has no {{placeholder}}: every row would own the same key")
        prefix = parts[0][0]
        if not prefix:
            raise ValueError(
                f"{text!r} must start with literal text (its prefix, which reconcile lists), not with a placeholder"
            )
        return cls(text, prefix, tuple(parts))

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for _, n in self.parts if n is not None))

    def format(self, values: Mapping[str, Any]) -> str | None:
        """The key `values` (each column's text form) form, or None when a placeholder's value is NULL: no key."""
        if any(values.get(name) is None for name in self.placeholders):
            return None
        return "".join(literal + ("" if name is None else str(values[name])) for literal, name in self.parts)

    def readings(
        self, key: str, fits: Mapping[str, Any] | None = None, limit: int = MAX_READINGS + 1
    ) -> list[dict[str, str]]:
        """Every way `key` splits into this template's literals and placeholder values (a value may hold any
        character, `/` included), each value fitting its column's text form (`fits`: column -> predicate); at most
        `limit`. `{checksum}.{kind}` reads `x.tar.gz` two ways: ("x.tar", "gz") and ("x", "tar.gz"). A reading only
        narrows the search for a row: whether a row forms the key is decided by comparing the key itself."""
        fits = fits or {}
        parts = self.parts
        if len(parts) == 2 and limit >= 1:  # prefix{column}suffix: one reading at most, found without a search
            (prefix, name), (suffix, _) = parts
            end = len(key) - len(suffix)
            if end < len(prefix) or not key.startswith(prefix) or not key.endswith(suffix):
                return []
            value = key[len(prefix) : end]
            fit = fits.get(name) if name is not None else None
            return [{name: value}] if name is not None and (fit is None or fit(value)) else []
        found: list[dict[str, str]] = []

        def walk(i: int, pos: int, values: dict[str, str]) -> None:
            literal, name = parts[i]
            if not key.startswith(literal, pos) or len(found) >= limit:
                return
            pos += len(literal)
            if name is None:
                if pos == len(key):
                    found.append(dict(values))
                return
            following = parts[i + 1][0]
            if parts[i + 1][1] is None:  # the template's last literal closes the key
                end = len(key) - len(following)
                ends = [end] if end >= pos and key.endswith(following) else []
            else:  # every place the next literal occurs
                ends, at = [], key.find(following, pos)
                while at != -1:
                    ends.append(at)
                    at = key.find(following, at + 1)
            for end in ends:
                value = key[pos:end]
                if name in values:
                    if values[name] != value:
                        continue
                    walk(i + 1, end, values)
                    continue
                fit = fits.get(name)
                if fit is not None and not fit(value):
                    continue
                walk(i + 1, end, {**values, name: value})

        walk(0, 0, {})
        return found

    def expression(self, alias: str | None = None) -> sql.Composed:
        """The key a row forms, in SQL: the literals and each placeholder column's text form, NULL where a column
        is NULL (a row forms no key then). Every decision that a row forms a key is made with this expression."""
        pieces: list[sql.Composable] = []
        for literal, name in self.parts:
            if literal:
                pieces.append(sql.Literal(literal))
            if name is not None:
                column = sql.Identifier(alias, name) if alias else sql.Identifier(name)
                pieces.append(sql.SQL("{}::text").format(column))
        return sql.SQL("({})").format(sql.SQL(" || ").join(pieces))


# ---------------------------------------------------------------------------------------------- the file
class Collection(BaseModel):
    """One collection as declared in the file (checked for shape only; `bind` checks it against the database)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    table: Annotated[str, StringConstraints(pattern=rf"^{IDENTIFIER}\.{IDENTIFIER}$")]
    id: Identifier
    created_at: Identifier | None = None
    size: Identifier | None = None
    # an S3 bucket, a GCS bucket (which may hold "_") or an Azure container, named as in its cloud
    bucket: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")] | None = None
    # the Airflow connection of the bucket's store: its type picks S3 (aws), GCS (google_cloud_platform) or Azure
    # Blob Storage (wasb); `s3_conn_id`, its older name, is still accepted (`_older_names`)
    conn_id: Annotated[str, StringConstraints(min_length=1)] = DEFAULT_S3_CONN_ID
    keys: Annotated[list[str], Field(min_length=1)]
    grace_hours: Annotated[float, Field(ge=0)] = DEFAULT_GRACE_HOURS
    references: list[Annotated[str, StringConstraints(min_length=1)]] = []
    quarantine_days: Annotated[int, Field(ge=0)] = 0  # days a deleted object waits in quarantine (0: none)

    @model_validator(mode="before")
    @classmethod
    def _older_names(cls, data: Any) -> Any:
        """`s3_conn_id`, the field's name before other stores, is read as `conn_id`; both at once are refused."""
        if isinstance(data, dict) and "s3_conn_id" in data:
            if "conn_id" in data:
                raise ValueError("give conn_id only: s3_conn_id is its older name")
            data = {**data, "conn_id": data["s3_conn_id"]}
            del data["s3_conn_id"]
        return data

    @field_validator("keys")
    @classmethod
    def _templates(cls, keys: list[str]) -> list[str]:
        for text in keys:
            KeyTemplate.parse_template(text)
        if len(set(keys)) != len(keys):
            raise ValueError("a key template is listed twice")
        return keys

    @cached_property
    def templates(self) -> tuple[KeyTemplate, ...]:
        return tuple(KeyTemplate.parse_template(t) for t in self.keys)

    @property
    def prefixes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.prefix for t in self.templates))

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column the collection names: the id, the optional ones, and the templates' placeholders."""
        named = [self.id, self.created_at, self.size, *(p for t in self.templates for p in t.placeholders)]
        return tuple(dict.fromkeys(c for c in named if c))

    @property
    def column_mode(self) -> bool:
        """True for a collection a kind declares in column mode, on its table: its mark state is its own columns."""
        return self.mode is not None

    @property
    def mode(self) -> ColumnMode | None:
        """The column mode a kind declares for this collection's name and table, if any."""
        mode = column_modes().get(self.name)
        return mode if mode is not None and mode.collection.table == self.table else None

    @property
    def reserved_by_a_kind(self) -> bool:
        """True for a collection whose name a kind declares in column mode (app_blob), on whatever table: it also
        takes Variable blobgc_extra_blob_references, as it did before collections existed."""
        return self.name in column_modes()

    @property
    def schema_name(self) -> str:
        return self.table.split(".", 1)[0]

    @property
    def table_name(self) -> str:
        return self.table.split(".", 1)[1]

    @property
    def table_identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema_name, self.table_name)

    @property
    def mark_table(self) -> sql.Identifier:
        """blobgc.mark_<name>: the ids found unused, and since when (not used by app_blob)."""
        return sql.Identifier("blobgc", f"mark_{self.name}")

    @property
    def source(self) -> str:
        """The deletion log's source for this collection's objects (a column-mode collection's: its kind's layout's)."""
        mode = self.mode
        return mode.source if mode is not None else f"{COLLECTION_SOURCE}{self.name}"

    def bucket_or(self, default: str) -> str:
        return self.bucket or default


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (PyYAML would keep the last silently)."""


def _mapping_without_duplicates(
    loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Hashable, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"{key!r} is given twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def describe_field(loc: Iterable[Any]) -> str:
    """A field's name from a pydantic error location: ('keys', 0) -> 'keys[0]'."""
    field = ""
    for p in loc:
        field += f"[{p}]" if isinstance(p, int) else (f".{p}" if field else str(p))
    return field or "(the collection itself)"


def parse_collections(
    text: str, *, source: str = "collections file", default_bucket: str = "blobgc"
) -> dict[str, Collection]:
    """Check the text of a collections file for shape; raise CollectionsError naming the collection and field."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise CollectionsError(f"{source} is not valid YAML: {error}") from error
    if not isinstance(data, dict) or set(data) != {"collections"} or not isinstance(data["collections"], dict):
        raise CollectionsError(f"{source} must be a mapping with one key, `collections`, mapping names to collections")
    found: dict[str, Collection] = {}
    for name, body in data["collections"].items():
        if not isinstance(body, dict):
            raise CollectionsError(f"{source}: collection {name!r}: must be a mapping of fields")
        if "name" in body:
            raise CollectionsError(f"{source}: collection {name!r}, field 'name': the name is the mapping key")
        try:
            found[str(name)] = Collection(name=name, **body)
        except ValidationError as error:
            first = error.errors()[0]
            field = describe_field(first["loc"])
            message = first["msg"].removeprefix("Value error, ")
            if first["type"] == "string_pattern_mismatch":
                message = f"{first['input']!r} {EXPECTED.get(field.split('[')[0], 'has the wrong form')}"
            raise CollectionsError(f"{source}: collection {name!r}, field {field!r}: {message}") from error
    if not found:
        raise CollectionsError(f"{source}: `collections` is empty; declare at least one")
    for c in found.values():
        mode = c.mode
        if mode is not None and c.keys != mode.collection.keys:  # its objects are judged by its kind's own layout
            raise CollectionsError(
                f"{source}: collection {c.name!r}, field 'keys': {c.name} on {c.table} keeps {mode.what}, "
                f"{mode.collection.keys}; declare other keys as a collection of its own"
            )
    check_prefixes(found, source=source, default_bucket=default_bucket)
    check_connections(found, source=source, default_bucket=default_bucket)
    return found


def check_connections(collections: Mapping[str, Collection], *, source: str, default_bucket: str) -> None:
    """One connection per bucket name: the outbox, quarantine and receipts know an object by bucket and key, so a
    bucket name reached through two connections (two stores, or two accounts of one) could not be told apart."""
    seen: dict[str, tuple[str, str]] = {}  # bucket -> (conn_id, collection)
    for c in collections.values():
        bucket = c.bucket_or(default_bucket)
        conn_id, other = seen.setdefault(bucket, (c.conn_id, c.name))
        if conn_id != c.conn_id:
            raise CollectionsError(
                f"{source}: collection {c.name!r}, field 'conn_id': bucket {bucket!r} is reached through "
                f"{c.conn_id!r} here and through {conn_id!r} by collection {other!r}; one bucket name has one "
                "connection (rename the bucket, or use one connection for both)"
            )


def check_prefixes(
    collections: Mapping[str, Collection],
    *,
    source: str,
    default_bucket: str,
    reserved: Iterable[tuple[str, str, str]] = (),
) -> None:
    """No two collections under overlapping prefixes of one bucket, nor a collection under a prefix blobgc's own
    seed layouts hold there (`reserved`: (bucket, prefix, the layout's table)): reconcile would judge one's keys by
    the other's rows, and each would delete the other's live objects."""
    claimed: list[tuple[str, str, str]] = []  # (bucket, prefix, collection)
    seeds = list(reserved)
    for c in collections.values():
        bucket = c.bucket_or(default_bucket)
        for prefix in c.prefixes:
            for seed_bucket, seed_prefix, table in seeds:
                if c.source != table and seed_bucket == bucket and overlap(prefix, seed_prefix):
                    raise CollectionsError(
                        f"{source}: collection {c.name!r}, field 'keys': prefix {prefix!r} overlaps the prefix "
                        f"{seed_prefix!r} of blobgc's own objects of table {table} in bucket {bucket!r}; give the "
                        "collection its own prefix (or bucket)"
                    )
            for other_bucket, other_prefix, other in claimed:
                if other != c.name and other_bucket == bucket and overlap(prefix, other_prefix):
                    raise CollectionsError(
                        f"{source}: collection {c.name!r}, field 'keys': prefix {prefix!r} overlaps collection "
                        f"{other!r}'s prefix {other_prefix!r} in bucket {bucket!r}; give each collection its own "
                        "prefix (or bucket)"
                    )
            claimed.append((bucket, prefix, c.name))


def overlap(prefix: str, other: str) -> bool:
    """Whether some key could lie under both prefixes."""
    return prefix.startswith(other) or other.startswith(prefix)


def load_collections(path: Path | None = None, *, default_bucket: str = "blobgc") -> dict[str, Collection]:
    """Read and check the collections file (see `parse_collections`)."""
    path = path or collections_path()
    try:
        text = path.read_text()
    except OSError as error:
        raise CollectionsError(
            f"cannot read the collections file {path} ({error.strerror or error}); set BLOBGC_COLLECTIONS to its path"
        ) from error
    return parse_collections(text, source=file_named(path), default_bucket=default_bucket)


def select(collections: Mapping[str, Collection], names: Iterable[str] | None) -> list[Collection]:
    """The collections a run asked for (the Param `collections`; None or empty: all), in the file's order."""
    if not names:
        return list(collections.values())
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in collections]
    if unknown:
        raise CollectionsError(
            f"Param collections names {unknown}, which the {file_named()} does not "
            f"declare (it has {sorted(collections)})"
        )
    return [collections[n] for n in wanted]


# ------------------------------------------------------------------------------------------- the catalog
@dataclass(frozen=True)
class BoundCollection:
    """A collection checked against the live catalog: its columns' types, and how its keys parse."""

    collection: Collection
    column_types: Mapping[str, str]  # column -> format_type(), e.g. "bigint", "text"
    bucket: str

    @property
    def name(self) -> str:
        return self.collection.name

    @property
    def id_type(self) -> str:
        return self.column_types[self.collection.id]

    @property
    def id_column(self) -> IdColumn:
        """What `blobgc.core.key_space` cuts into ranges."""
        return IdColumn(self.collection.table, self.collection.id, self.id_type)

    @cached_property
    def fits(self) -> dict[str, Any]:
        """Column -> a predicate of a value's text form, for the columns whose text form is constrained."""
        return {
            column: fit
            for column, type_name in self.column_types.items()
            if (fit := text_form_of(type_name)) is not None
        }

    @cached_property
    def lookup_queries(self) -> dict[str, tuple[str, str]]:
        """The statements `accounted_keys` asks the table with, per template (composed once per binding)."""
        return lookup_queries(self)

    @cached_property
    def narrowing_columns(self) -> dict[str, str | None]:
        """Template text -> the column its keys are looked up by (`narrowing_column`)."""
        return {t.text: narrowing_column(self, t) for t in self.collection.templates}

    def readings(self, key: str) -> list[tuple[KeyTemplate, list[dict[str, str]]]]:
        """(template, its readings of `key`) for every template whose shape `key` has (see `KeyTemplate.readings`)."""
        return [
            (t, found)
            for t in self.collection.templates
            if key.startswith(t.prefix) and (found := t.readings(key, self.fits))
        ]

    def parse_key(self, key: str) -> tuple[KeyTemplate, dict[str, str]] | None:
        """A template whose shape `key` has and one reading of it, or None for a key of no template's shape."""
        shaped = self.readings(key)
        return (shaped[0][0], shaped[0][1][0]) if shaped else None

    def keys_of(self, values: Mapping[str, Any]) -> list[str]:
        """The keys `values` (each column's text form, as PostgreSQL gives it) form; a NULL column forms none."""
        return [key for t in self.collection.templates if (key := t.format(values)) is not None]

    def key_array(self, alias: str | None = None) -> sql.Composed:
        """`ARRAY[...]::text[]` of the keys a row forms, one per template in order (NULL where a column is NULL)."""
        return sql.SQL("ARRAY[{}]::text[]").format(
            sql.SQL(", ").join(t.expression(alias) for t in self.collection.templates)
        )

    def statement(self, name: str | queries.Statement, **parts: sql.Composable) -> sql.Composed:
        """blobgc/sql/<name>.sql (or a kind's Statement) with the collection's {table}, {id}, {type} and {marks}
        filled in, and `parts`."""
        c = self.collection
        return sql.SQL(queries.load(name)).format(
            table=c.table_identifier, id=sql.Identifier(c.id), type=sql.SQL(self.id_type), marks=c.mark_table, **parts
        )

    def rendered_keys(self) -> sql.Composed:
        """A SELECT of (key, false) for every key each row's templates form, for reconcile's inventory anti-join:
        the same expressions (`KeyTemplate.expression`) as every other decision that a row forms a key."""
        selects = [
            sql.SQL("SELECT {key}, false FROM {table} WHERE {key} IS NOT NULL").format(
                key=template.expression(), table=self.collection.table_identifier
            )
            for template in self.collection.templates
        ]
        return sql.SQL(" UNION ALL ").join(selects)

    def mark_table_exists(self, conn: psycopg.Connection) -> bool:
        """Whether blobgc.mark_<name> exists yet (the first real mark creates it)."""
        return table_exists(conn, f"blobgc.mark_{self.name}")


COLLECTION_SOURCE = "collection:"  # the deletion-log source of a collection not in column mode: collection:<name>


@dataclass(frozen=True)
class ColumnMode:
    """A collection that keeps its mark state in its own table's columns, as the kind that owns it declares it.

    `collection` is the declaration the collections file must give it (its table and keys); `what` says whose
    objects those keys are; `source` is the
    deletion-log source of its objects (the kind's key layout); `column_types` binds it without the catalog (a
    restore of a table dropped since); its table has the columns `unused` and `updated_at` (since when), which
    the sweep's counts read; `statements` names the kind's statements for the steps that differ from a
    mark table's (`mark/select_marks`, `sweep/select_unused_rows`, ...); `mark_tables` are the tables its mark
    also writes, with the privileges it uses there.
    """

    collection: Collection
    what: str  # whose objects its keys are, in words ("seed 000's objects")
    source: str
    column_types: Mapping[str, str]
    statements: Mapping[str, queries.Statement]
    mark_tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def statement(self, step: str) -> queries.Statement:
        return self.statements[step]

    def bound(self, bucket: str) -> BoundCollection:
        """The collection bound without asking the catalog: its columns are the kind's."""
        return BoundCollection(self.collection, dict(self.column_types), bucket)


class KindsNotInstalled(RuntimeError):
    """Something asked what the kinds declare (a layout, a column mode) before `blobgc.kinds` installed them: no
    guard may be skipped, and no collection taken for another mode, for that."""


@dataclass
class Installation:
    """Whether `blobgc.core.registry.install` installed the kinds: the one flag that every look-up of what the
    kinds declare (a key layout, reconcile's key sources, a column mode) checks first."""

    done: bool = False

    def check(self) -> None:
        if not self.done:
            raise KindsNotInstalled(
                "no kind of collector is installed: import blobgc.kinds (which installs them all) before asking "
                "what the kinds declare (a key layout, reconcile's key sources, a collection's column mode)"
            )


INSTALLATION = Installation()
COLUMN_MODES: dict[str, ColumnMode] = {}  # the kinds' column-mode collections, by name


def install_column_modes(modes: Iterable[ColumnMode]) -> None:
    """Register the kinds' column-mode collections (`blobgc.core.registry.install` calls it)."""
    COLUMN_MODES.clear()
    COLUMN_MODES.update({m.collection.name: m for m in modes})


def column_modes() -> dict[str, ColumnMode]:
    """The column-mode collections by name; raises until the kinds are installed (a collection must never be
    taken for one with a mark table because nobody installed its kind)."""
    INSTALLATION.check()
    return COLUMN_MODES


def column_mode_of_source(source: str) -> ColumnMode | None:
    """The column-mode collection whose objects a deletion-log source names, if any."""
    return next((m for m in column_modes().values() if m.source == source), None)


def collection_of_source(source: str) -> str | None:
    """The collection whose objects a deletion-log source names, or None for a kind's own source."""
    if (mode := column_mode_of_source(source)) is not None:
        return mode.collection.name
    return source[len(COLLECTION_SOURCE) :] if source.startswith(COLLECTION_SOURCE) else None


def accounted_keys(conn: psycopg.Connection, bound: BoundCollection, keys: Iterable[str]) -> tuple[set[str], set[str]]:
    """(keys some row of the collection forms now, keys of no template's shape).

    A key is accounted for exactly when a row forms that very key (`KeyTemplate.expression`, compared in SQL);
    the key's readings only narrow the look-up to the rows whose first indexable placeholder column holds one of
    the values a reading gives it. A key with too many readings is looked up by its whole key alone.
    """
    unshaped: set[str] = set()
    lookups: dict[KeyTemplate, tuple[list[str], list[str | None]]] = {}
    for key in dict.fromkeys(keys):
        shaped = bound.readings(key)
        if not shaped:
            unshaped.add(key)
        for template, found in shaped:
            lead = bound.narrowing_columns[template.text]
            pairs = lookups.setdefault(template, ([], []))
            candidates = sorted({r[lead] for r in found}) if lead and len(found) <= MAX_READINGS else [None]
            for value in candidates:
                pairs[0].append(key)
                pairs[1].append(value)
    accounted: set[str] = set()
    for template, (looked_up, values) in lookups.items():
        accounted |= keys_formed(conn, bound, template, looked_up, values)
    return accounted, unshaped


def keys_formed(
    conn: psycopg.Connection, bound: BoundCollection, template: KeyTemplate, keys: list[str], values: list[str | None]
) -> set[str]:
    """Which of `keys` a row forms with `template`; `values[i]` (or None: any row) narrows key i's look-up to the
    rows whose narrowing column holds it."""
    narrowed, whole = bound.lookup_queries[template.text]
    lead = bound.narrowing_columns[template.text]
    accounted: set[str] = set()
    exact = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None or lead is None]
    scan = [k for k, v in zip(keys, values, strict=True) if v is None and lead is not None]
    if exact:
        accounted |= {
            r[0] for r in conn.execute(narrowed, {"keys": [k for k, _ in exact], "values": [v for _, v in exact]})
        }
    if scan:  # too many readings to narrow: one scan of the rows' keys for all of them
        accounted |= {r[0] for r in conn.execute(whole, {"keys": scan})}
    return accounted


def lookup_queries(bound: BoundCollection) -> dict[str, tuple[str, str]]:
    """Template text -> (the look-up of (key, narrowing value) pairs, the look-up of whole keys), composed once."""
    table = bound.collection.table_identifier
    out = {}
    for template in bound.collection.templates:
        lead = narrowing_column(bound, template)
        formed = template.expression("t")
        narrow = (
            sql.SQL("true")
            if lead is None
            else sql.SQL("t.{c} = x.v::{type}").format(c=sql.Identifier(lead), type=sql.SQL(bound.column_types[lead]))
        )
        narrowed = sql.SQL(
            "SELECT DISTINCT x.k FROM unnest(%(keys)b::text[], %(values)b::text[]) AS x(k, v) "
            "JOIN {table} AS t ON {narrow} AND {formed} = x.k"
        ).format(table=table, narrow=narrow, formed=formed)
        whole = sql.SQL("SELECT DISTINCT {formed} FROM {table} AS t WHERE {formed} = ANY(%(keys)b::text[])").format(
            formed=formed, table=table
        )
        out[template.text] = (narrowed.as_string(None), whole.as_string(None))
    return out


def narrowing_column(bound: BoundCollection, template: KeyTemplate) -> str | None:
    """The template's first placeholder whose column a candidate value can be compared with exactly and without a
    cast error (a character, integer or uuid column), or None: the look-up compares whole keys only."""
    for name in template.placeholders:
        type_name = bound.column_types.get(name, "")
        if CHARACTER_TYPES.fullmatch(type_name) or type_name in INTEGER_RANGES or type_name == "uuid":
            return name
    return None


def text_form_of(type_name: str) -> Any:
    """A predicate of the text forms PostgreSQL gives values of `type_name` (None: any text, as for text columns)."""
    if type_name in INTEGER_RANGES:
        bound = INTEGER_RANGES[type_name]
        return lambda v: bool(CANONICAL_INTEGER.fullmatch(v)) and -bound <= int(v) < bound
    if type_name == "uuid":
        return lambda v: bool(UUID_TEXT.fullmatch(v))
    if NUMERIC_TYPE.fullmatch(type_name):
        return lambda v: bool(NUMERIC_TEXT.fullmatch(v))
    return None  # any other type (text, a domain, an enum, citext in any schema...): any text, the empty one too


CATALOG_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory, a.attnotnull
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = %(table)s::regclass AND a.attnum > 0 AND NOT a.attisdropped
"""
UNIQUE_COLUMNS = """
SELECT (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[0]), i.indisprimary
FROM pg_index i
WHERE i.indrelid = %(table)s::regclass AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL
  AND i.indexprs IS NULL
"""
INDEXED_LEADING_COLUMNS = """
SELECT DISTINCT (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[0])
FROM pg_index i WHERE i.indrelid = %(table)s::regclass AND i.indpred IS NULL
"""


def bind(
    conn: psycopg.Connection, collection: Collection, *, default_bucket: str, source: str | None = None
) -> BoundCollection:
    """Check one collection against the database now; raise CollectionsError naming the file (`source`, default
    `file_named()`), the collection and the field."""
    source = source or file_named()

    def fail(field: str, message: str) -> CollectionsError:
        return CollectionsError(f"{source}: collection {collection.name!r}, field {field!r}: {message}")

    if not table_exists(conn, collection.table):
        raise fail("table", f"table {collection.table} does not exist (or this role cannot see it)")
    if not queries.one_row(conn.execute("SELECT has_table_privilege(%s, 'SELECT, DELETE')", (collection.table,)))[0]:
        raise fail("table", f"this role needs SELECT and DELETE on {collection.table}")
    columns = {
        name: (type_name, category, not_null)
        for name, type_name, category, not_null in conn.execute(CATALOG_COLUMNS, {"table": collection.table})
    }

    def column(field: str, name: str | None) -> None:
        if name is not None and name not in columns:
            raise fail(field, f"{collection.table} has no column {name!r}")

    column("id", collection.id)
    column("created_at", collection.created_at)
    column("size", collection.size)
    for i, template in enumerate(collection.templates):
        for placeholder in template.placeholders:
            if placeholder not in columns:
                raise fail(
                    f"keys[{i}]",
                    f"placeholder {{{placeholder}}} of {template.text!r} is not a column of {collection.table}",
                )
    unique = {name: primary for name, primary in conn.execute(UNIQUE_COLUMNS, {"table": collection.table})}
    if collection.id not in unique or not columns[collection.id][2]:
        raise fail(
            "id",
            f"column {collection.id!r} must be the primary key of {collection.table} (or a unique "
            "NOT NULL column): a row must be named by its id alone",
        )
    if collection.created_at and columns[collection.created_at][1] != "D":
        raise fail(
            "created_at", f"column {collection.created_at!r} is {columns[collection.created_at][0]}, not a timestamp"
        )
    if collection.size and columns[collection.size][1] != "N":
        raise fail("size", f"column {collection.size!r} is {columns[collection.size][0]}, not a number")
    id_type, id_category = columns[collection.id][0], columns[collection.id][1]
    for i, text in enumerate(collection.references):
        try:
            check_extra_query(conn, i, text.strip().rstrip(";"), id_type, id_category)
        except ConfigurationError as error:
            raise fail(f"references[{i}]", str(error)) from error
    return BoundCollection(
        collection, {name: columns[name][0] for name in collection.columns}, collection.bucket_or(default_bucket)
    )


def ensure_mark_table(conn: psycopg.Connection, bound: BoundCollection) -> None:
    """Create the collection's mark table, blobgc.mark_<name>, if it is missing (typed like the collection's id).

    Only when it is missing: PostgreSQL checks CREATE on schema blobgc even for `CREATE TABLE IF NOT EXISTS`, and
    a role that owns the table need not keep that privilege (the first task asks for it only before the first
    mark, `blobgc.core.privileges`)."""
    if bound.mark_table_exists(conn):
        return
    with conn.transaction():
        conn.execute(bound.statement("collections/create_mark_table"))


def warn_unindexed(conn: psycopg.Connection, bound: BoundCollection) -> list[str]:
    """Warn (and return the columns) when the column a template's keys are looked up by (`narrowing_column`)
    leads no index of the table: reconcile asks the table about each page of keys by it, and would scan it each
    time."""
    indexed = {r[0] for r in conn.execute(INDEXED_LEADING_COLUMNS, {"table": bound.collection.table})}
    missing = []
    for template in bound.collection.templates:
        lead = narrowing_column(bound, template)
        if lead is not None and lead not in indexed and lead not in missing:
            missing.append(lead)
            log.warning(
                "collection %s: no index of %s starts with column %s, which key template %r is read back "
                "into: reconcile's check of each page of keys will scan the table (CREATE INDEX CONCURRENTLY "
                "ON %s (%s))",
                bound.name,
                bound.collection.table,
                lead,
                template.text,
                bound.collection.table,
                ", ".join(template.placeholders),
            )
    return missing


def warn_slash_values(bound: BoundCollection) -> list[str]:
    """Warn (and return the placeholders) where a text placeholder may hold `/`: blobgc forms and compares such keys
    exactly, but a key then lies deeper under the prefix than the template reads, and reconcile takes every key
    under the prefix that some reading fits for this template's (deleting it, once old, if no row forms it)."""
    found = []
    for template in bound.collection.templates:
        for name in template.placeholders:
            if CHARACTER_TYPES.fullmatch(bound.column_types.get(name, "")) and name not in found:
                found.append(name)
                log.warning(
                    "collection %s: placeholder {%s} of key template %r is %s, whose values may hold '/': such "
                    "keys are formed and matched exactly, and every key under %r that the template can read "
                    "is the collection's (an old one no row forms is an orphan)",
                    bound.name,
                    name,
                    template.text,
                    bound.column_types.get(name),
                    template.prefix,
                )
    return found


class CollectionSource(Protocol):
    """Where a run's collections come from, as the collectors of collections read them (`blobgc.collectors.sweep.Sweep`,
    `blobgc.collectors.reconcile.deletion.Reconcile`): in a DAG, the collections file and Airflow's settings
    (`blobgc.dag_kit.collections.FILE`)."""

    def bucket(self) -> str:
        """The bucket a collection that names none keeps its objects in."""
        ...

    def checked(
        self, conn: psycopg.Connection, params: Mapping[str, Any], *, index_warnings: bool = False
    ) -> list[BoundCollection]:
        """The collections the run's Param `collections` selects, each checked against the catalog."""
        ...

    def one(self, conn: psycopg.Connection, name: str) -> BoundCollection:
        """One collection, checked against the catalog now (a mapped task binds its own)."""
        ...

    def references(self, conn: psycopg.Connection, bound: BoundCollection) -> ReferenceSet:
        """Every reference to the collection's rows."""
        ...

    def store(self, default: Any) -> Any:
        """The object store reaching every collection's bucket (`default`, or one per bucket's connection)."""
        ...

    def check_buckets(self, default: Any, collections: list[BoundCollection]) -> None:
        """Refuse a missing bucket of the selected collections, naming its collection."""
        ...
