"""Collections (CONTRACT §6): any PostgreSQL table of blobs whose objects live in S3, declared in a YAML file.

The file is `$BLOBGC_COLLECTIONS`, or `include/collections.yaml` when that is unset:

    collections:
      uploads:                          # name: [a-z][a-z0-9_]*, unique
        table: shop.upload              # schema-qualified; blobgc never alters it
        id: id                          # primary-key column (or a unique NOT NULL one), any type
        created_at: created_at          # optional: rows younger than the grace are never swept
        size: size_bytes                # optional: bytes of the first key's object, for the reclaim figures
        bucket: uploads                 # optional, default Variable blobgc_bucket
        s3_conn_id: blobgc_s3           # optional, default blobgc_s3
        keys: ["up/{sha}.{ext}"]        # one or more; each {placeholder} is a column of the row
        grace_hours: 24                 # optional, default 24
        references:                     # optional: SELECTs of referenced ids that no foreign key declares
          - "SELECT upload_id FROM shop.legacy_ref"

Checking happens in two steps, and both name the collection and the field of anything wrong:

1. `load_collections` reads the file and checks its shape (pydantic): names, identifiers, templates
   (every placeholder a plain name, literal text before the first one and between any two), no two
   collections under overlapping prefixes of one bucket, no name twice.
2. `bind` checks a collection against the live catalog: the table and every named column exist, the
   id is the primary key or a unique NOT NULL column, the size is a number, every reference query
   runs and returns one column of ids. It returns a `BoundCollection`, which knows each column's
   type and so how to parse a key back into column values that cast without error.

`app_blob` (the demo's `app.blob`) keeps its mark state in its own columns (CONTRACT §3); every
other collection keeps it in blobgc's own table `blobgc.mark_<name>`, and no column is ever added
to a user's table.
"""
from __future__ import annotations

import logging
import os
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

import psycopg
import yaml
from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from blobgc.core import queries
from blobgc.core.catalog import table_exists
from blobgc.core.key_space import IdColumn
from blobgc.core.references import check_extra_query
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

COLUMN_MODE = "app_blob"  # the one collection whose mark state lives in its own table's columns (CONTRACT §3)
COLUMN_MODE_TABLE = "app.blob"
DEFAULT_S3_CONN_ID = "blobgc_s3"
DEFAULT_GRACE_HOURS = 24.0

IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
Identifier = Annotated[str, StringConstraints(pattern=rf"^{IDENTIFIER}$")]
# A collection's name also names its mark table (blobgc.mark_<name>), so it stays well under 63 characters.
Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,47}$")]
# Type categories whose text form is a plain signed number: a placeholder of such a column parses as digits only.
NUMERIC_TYPES = {"smallint": r"-?[0-9]{1,5}", "integer": r"-?[0-9]{1,10}", "bigint": r"-?[0-9]{1,19}",
                 "numeric": r"-?[0-9]{1,30}"}
UUID_TEXT = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
ANY_SEGMENT = r"[^/]+"
EXPECTED = {  # what a field that fails its pattern must look like
    "name": "is not a collection name: lower case letters, digits and _, starting with a letter, at most 48",
    "table": "is not a schema-qualified table name such as app.blob",
    "id": "is not a column name", "created_at": "is not a column name", "size": "is not a column name",
    "bucket": "is not an S3 bucket name",
}


class CollectionsError(ConfigurationError):
    """The collections file is missing, malformed, or does not match the database: nothing is deleted."""


def collections_path() -> Path:
    """$BLOBGC_COLLECTIONS, or else `include/collections.yaml` of the Airflow project.

    The project is the checkout blobgc runs from (plugins/blobgc/ beside include/), or else
    $AIRFLOW_HOME (the official image's and Astro's include/ lie there), or else the working directory.
    """
    override = os.environ.get("BLOBGC_COLLECTIONS")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[3]
    if (checkout / "plugins" / "blobgc").is_dir():
        return checkout / "include" / "collections.yaml"
    return Path(os.environ.get("AIRFLOW_HOME") or ".") / "include" / "collections.yaml"


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
        for i, (literal, name, spec, conversion) in enumerate(parsed):
            if name is not None:
                if not re.fullmatch(IDENTIFIER, name):
                    raise ValueError(f"{text!r}: placeholder {{{name}}} must be a plain column name")
                if spec or conversion:
                    raise ValueError(f"{text!r}: placeholder {{{name}}} may not have a format or conversion")
                if i > 0 and not literal:
                    raise ValueError(f"{text!r}: placeholders must be separated by literal text, or a key "
                                     "cannot be read back")
            parts.append((literal, name))
        names = [n for _, n in parts if n is not None]
        if not names:
            raise ValueError(f"{text!r} has no {{placeholder}}: every row would own the same key")
        prefix = parts[0][0]
        if not prefix:
            raise ValueError(f"{text!r} must start with literal text (its prefix, which reconcile lists), "
                             "not with a placeholder")
        return cls(text, prefix, tuple(parts))

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for _, n in self.parts if n is not None))

    def format(self, values: Mapping[str, Any]) -> str:
        return "".join(literal + ("" if name is None else str(values[name])) for literal, name in self.parts)

    def pattern(self, column_patterns: Mapping[str, str]) -> re.Pattern[str]:
        """The whole-key regex: each placeholder as its column's text form (a repeated one must repeat)."""
        out, seen = [], set()
        for literal, name in self.parts:
            out.append(re.escape(literal))
            if name is not None:
                out.append(f"(?P={name})" if name in seen else f"(?P<{name}>{column_patterns.get(name, ANY_SEGMENT)})")
                seen.add(name)
        return re.compile("".join(out))


# ---------------------------------------------------------------------------------------------- the file
class Collection(BaseModel):
    """One collection as declared in the file (checked for shape only; `bind` checks it against the database)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    table: Annotated[str, StringConstraints(pattern=rf"^{IDENTIFIER}\.{IDENTIFIER}$")]
    id: Identifier
    created_at: Identifier | None = None
    size: Identifier | None = None
    bucket: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")] | None = None
    s3_conn_id: Annotated[str, StringConstraints(min_length=1)] = DEFAULT_S3_CONN_ID
    keys: Annotated[list[str], Field(min_length=1)]
    grace_hours: Annotated[float, Field(ge=0)] = DEFAULT_GRACE_HOURS
    references: list[Annotated[str, StringConstraints(min_length=1)]] = []

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
        """True for app_blob on app.blob: its mark state is its own `unused`/`updated_at` columns (CONTRACT §3)."""
        return self.name == COLUMN_MODE and self.table == COLUMN_MODE_TABLE

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
        """The deletion log's source for this collection's objects."""
        return COLUMN_MODE_TABLE if self.column_mode else f"collection:{self.name}"

    def bucket_or(self, default: str) -> str:
        return self.bucket or default


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (PyYAML would keep the last silently)."""


def _mapping_without_duplicates(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
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


def parse_collections(text: str, *, source: str = "collections file", default_bucket: str = "blobgc"
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
    check_prefixes(found, source=source, default_bucket=default_bucket)
    return found


def check_prefixes(collections: Mapping[str, Collection], *, source: str, default_bucket: str) -> None:
    """No two collections under one prefix of one bucket: reconcile would judge one's keys by the other's rows."""
    claimed: list[tuple[str, str, str]] = []  # (bucket, prefix, collection)
    for c in collections.values():
        bucket = c.bucket_or(default_bucket)
        for prefix in c.prefixes:
            for other_bucket, other_prefix, other in claimed:
                if other != c.name and other_bucket == bucket and (
                        prefix.startswith(other_prefix) or other_prefix.startswith(prefix)):
                    raise CollectionsError(
                        f"{source}: collection {c.name!r}, field 'keys': prefix {prefix!r} overlaps collection "
                        f"{other!r}'s prefix {other_prefix!r} in bucket {bucket!r}; give each collection its own "
                        "prefix (or bucket)")
            claimed.append((bucket, prefix, c.name))


def load_collections(path: Path | None = None, *, default_bucket: str = "blobgc") -> dict[str, Collection]:
    """Read and check the collections file (see `parse_collections`)."""
    path = path or collections_path()
    try:
        text = path.read_text()
    except OSError as error:
        raise CollectionsError(f"cannot read the collections file {path} ({error.strerror or error}); "
                               "set BLOBGC_COLLECTIONS to its path") from error
    return parse_collections(text, source=f"collections file {path}", default_bucket=default_bucket)


def select(collections: Mapping[str, Collection], names: Iterable[str] | None) -> list[Collection]:
    """The collections a run asked for (the Param `collections`; None or empty: all), in the file's order."""
    if not names:
        return list(collections.values())
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in collections]
    if unknown:
        raise CollectionsError(f"Param collections names {unknown}, which the collections file does not declare "
                               f"(it has {sorted(collections)})")
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
    def patterns(self) -> tuple[tuple[Any, re.Pattern[str]], ...]:
        """(template, whole-key regex) for each template; a placeholder matches only its column's text form."""
        column_patterns = {c: pattern_for_type(t) for c, t in self.column_types.items()}
        return tuple((t, t.pattern(column_patterns)) for t in self.collection.templates)

    def parse_key(self, key: str) -> tuple[KeyTemplate, dict[str, str]] | None:
        """The template a key fits and its placeholders' values (column text), or None for a key of no template."""
        for template, pattern in self.patterns:
            if key.startswith(template.prefix) and (match := pattern.fullmatch(key)):
                return template, match.groupdict()
        return None

    def keys_of(self, values: Mapping[str, Any]) -> list[str]:
        return [t.format(values) for t in self.collection.templates]

    def statement(self, name: str, **parts: sql.Composable) -> sql.Composed:
        """blobgc/sql/<name>.sql with the collection's {table}, {id}, {type} and {marks} filled in, and `parts`."""
        c = self.collection
        return sql.SQL(queries.load(name)).format(table=c.table_identifier, id=sql.Identifier(c.id),
                                                  type=sql.SQL(self.id_type), marks=c.mark_table, **parts)

    def rendered_keys(self) -> sql.Composed:
        """A SELECT of (key, false) for every key each row's templates form, for reconcile's inventory anti-join.

        A column's text form in PostgreSQL is what its placeholder parses as; a key formed otherwise by the
        application is only missed by this pre-filter, and the per-key check (`accounted_keys`) still finds
        its row.
        """
        selects = []
        for template in self.collection.templates:
            key = sql.SQL(" || ").join(
                part for literal, name in template.parts
                for part in ([sql.Literal(literal)] if literal else [])
                + ([sql.SQL("{}::text").format(sql.Identifier(name))] if name else []))
            selects.append(sql.SQL("SELECT {key}, false FROM {table} WHERE {key} IS NOT NULL").format(
                key=key, table=self.collection.table_identifier))
        return sql.SQL(" UNION ALL ").join(selects)

    def mark_table_exists(self, conn: psycopg.Connection) -> bool:
        """Whether blobgc.mark_<name> exists yet (the first real mark creates it)."""
        return table_exists(conn, f"blobgc.mark_{self.name}")


# The demo's app.blob as CONTRACT §6's example file declares it (what include/collections.yaml holds).
APP_BLOB = Collection(name=COLUMN_MODE, table=COLUMN_MODE_TABLE, id="id", created_at="created_at", size="size_bytes",
                      keys=["blobs/{id}/raw", "blobs/{id}/thumbnail"])


def bound_app_blob(bucket: str) -> BoundCollection:
    """APP_BLOB bound without asking the catalog: its columns are CONTRACT §3's."""
    return BoundCollection(APP_BLOB, {"id": "text", "created_at": "timestamp with time zone", "size_bytes": "bigint"},
                           bucket)


COLLECTION_SOURCE = "collection:"  # the deletion-log source of a collection other than app_blob: collection:<name>


def collection_of_source(source: str) -> str | None:
    """The collection whose objects a deletion-log source names, or None for a seed's own source."""
    if source == APP_BLOB.source:
        return APP_BLOB.name
    return source[len(COLLECTION_SOURCE):] if source.startswith(COLLECTION_SOURCE) else None


def rows_exist(conn: psycopg.Connection, bound: BoundCollection, columns: tuple[str, ...],
               values: list[Mapping[str, str]]) -> list[bool]:
    """For each set of column values (text, as parsed from a key), whether a row of the collection has them now.

    One query for the whole list: the values are cast to the columns' types (which the key patterns
    guarantee they fit), so the table's indexes on those columns are used.
    """
    if not values:
        return []
    aliases = [sql.Identifier(f"v{i}") for i in range(len(columns))]
    query = sql.SQL("SELECT x.ord FROM unnest({arrays}) WITH ORDINALITY AS x({aliases}, ord) WHERE EXISTS "
                    "(SELECT 1 FROM {table} AS t WHERE {match})").format(
        arrays=sql.SQL(", ").join(sql.Placeholder(f"c{i}") + sql.SQL("::text[]") for i in range(len(columns))),
        aliases=sql.SQL(", ").join(aliases),
        table=bound.collection.table_identifier,
        match=sql.SQL(" AND ").join(
            sql.SQL("t.{c} = x.{a}::{t}").format(c=sql.Identifier(c), a=a, t=sql.SQL(bound.column_types[c]))
            for c, a in zip(columns, aliases, strict=True)))
    params = {f"c{i}": [v[c] for v in values] for i, c in enumerate(columns)}
    found = {r[0] for r in conn.execute(query, params)}
    return [i + 1 in found for i in range(len(values))]


def accounted_keys(conn: psycopg.Connection, bound: BoundCollection, keys: Iterable[str]) -> tuple[set[str], set[str]]:
    """(keys a row of the collection accounts for now, keys that fit none of its templates)."""
    by_columns: dict[tuple[str, ...], list[tuple[str, dict[str, str]]]] = {}
    unparsed: set[str] = set()
    for key in keys:
        parsed = bound.parse_key(key)
        if parsed is None:
            unparsed.add(key)
        else:
            template, values = parsed
            by_columns.setdefault(template.placeholders, []).append((key, values))
    accounted: set[str] = set()
    for columns, items in by_columns.items():
        exists = rows_exist(conn, bound, columns, [v for _, v in items])
        accounted |= {key for (key, _), there in zip(items, exists, strict=True) if there}
    return accounted, unparsed


def pattern_for_type(type_name: str) -> str:
    if type_name in NUMERIC_TYPES:
        return NUMERIC_TYPES[type_name]
    if type_name == "uuid":
        return UUID_TEXT
    return ANY_SEGMENT


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


def bind(conn: psycopg.Connection, collection: Collection, *, default_bucket: str,
         source: str = "collections file") -> BoundCollection:
    """Check one collection against the database now; raise CollectionsError naming the collection and field."""

    def fail(field: str, message: str) -> CollectionsError:
        return CollectionsError(f"{source}: collection {collection.name!r}, field {field!r}: {message}")

    if not table_exists(conn, collection.table):
        raise fail("table", f"table {collection.table} does not exist (or this role cannot see it)")
    if not conn.execute("SELECT has_table_privilege(%s, 'SELECT, DELETE')", (collection.table,)).fetchone()[0]:
        raise fail("table", f"this role needs SELECT and DELETE on {collection.table}")
    columns = {name: (type_name, category, not_null) for name, type_name, category, not_null
               in conn.execute(CATALOG_COLUMNS, {"table": collection.table})}

    def column(field: str, name: str | None) -> None:
        if name is not None and name not in columns:
            raise fail(field, f"{collection.table} has no column {name!r}")

    column("id", collection.id)
    column("created_at", collection.created_at)
    column("size", collection.size)
    for i, template in enumerate(collection.templates):
        for placeholder in template.placeholders:
            if placeholder not in columns:
                raise fail(f"keys[{i}]", f"placeholder {{{placeholder}}} of {template.text!r} is not a column of "
                                         f"{collection.table}")
    unique = {name: primary for name, primary in conn.execute(UNIQUE_COLUMNS, {"table": collection.table})}
    if collection.id not in unique or not columns[collection.id][2]:
        raise fail("id", f"column {collection.id!r} must be the primary key of {collection.table} (or a unique "
                         "NOT NULL column): a row must be named by its id alone")
    if collection.created_at and columns[collection.created_at][1] != "D":
        raise fail("created_at", f"column {collection.created_at!r} is {columns[collection.created_at][0]}, "
                                 "not a timestamp")
    if collection.size and columns[collection.size][1] != "N":
        raise fail("size", f"column {collection.size!r} is {columns[collection.size][0]}, not a number")
    id_type, id_category = columns[collection.id][0], columns[collection.id][1]
    for i, text in enumerate(collection.references):
        try:
            check_extra_query(conn, i, text.strip().rstrip(";"), id_type, id_category)
        except ConfigurationError as error:
            raise fail(f"references[{i}]", str(error)) from error
    return BoundCollection(collection, {name: columns[name][0] for name in collection.columns},
                           collection.bucket_or(default_bucket))


def ensure_mark_table(conn: psycopg.Connection, bound: BoundCollection) -> None:
    """Create the collection's mark table, blobgc.mark_<name>, if it is missing (typed like the collection's id)."""
    with conn.transaction():
        conn.execute(bound.statement("collections/create_mark_table"))


def warn_unindexed(conn: psycopg.Connection, bound: BoundCollection) -> list[str]:
    """Warn (and return the columns) when a template's first placeholder column leads no index of the table:
    reconcile asks the table about each page of keys by those columns, and would scan it each time."""
    indexed = {r[0] for r in conn.execute(INDEXED_LEADING_COLUMNS, {"table": bound.collection.table})}
    missing = []
    for template in bound.collection.templates:
        lead = template.placeholders[0]
        if lead not in indexed and lead not in missing:
            missing.append(lead)
            log.warning("collection %s: no index of %s starts with column %s, which key template %r is read back "
                        "into: reconcile's check of each page of keys will scan the table (CREATE INDEX CONCURRENTLY "
                        "ON %s (%s))", bound.name, bound.collection.table, lead, template.text,
                        bound.collection.table, ", ".join(template.placeholders))
    return missing
