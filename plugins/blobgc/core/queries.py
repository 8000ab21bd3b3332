"""Load SQL statements shipped as package data: `<package>/sql/<area>/<verb>_<object>.sql`.

blobgc's statements live in `blobgc/sql/` (migrations in `blobgc/sql/migrations/`), read through
`importlib.resources`, so they are found the same way in the source tree (plugins/ on the path), in an
installed wheel, and in a zipped or copied deployment. An application beside blobgc (the demo's
`demo_app`) keeps its own under its own package and loads them with `load(name, package=...)`, and so does
each kind of collector (`blobgc/kinds/<kind>/sql/`). `one_row` reads the row a statement always returns.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TypeVar

import psycopg

PACKAGE = "blobgc"

Row = TypeVar("Row")


def sql_root(package: str = PACKAGE) -> Traversable:
    """The `sql` folder of `package` (blobgc's by default), as package data."""
    return resources.files(package).joinpath("sql")


@dataclass(frozen=True)
class Statement:
    """A statement named with its package, for a statement chosen by data (a kind's reconcile key source)."""

    name: str
    package: str = PACKAGE


@functools.cache
def load(name: str | Statement, package: str = PACKAGE) -> str:
    """The text of `<package>/sql/<name>.sql`, e.g. load("sweep/claim_unused_blobs"); a Statement names its own."""
    if isinstance(name, Statement):
        package = name.package
        name = name.name
    try:
        text = sql_root(package).joinpath(f"{name}.sql").read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"no SQL statement {name!r} in package {package!r} ({package}/sql/{name}.sql): "
            "is the package installed whole, with its package data?"
        ) from error
    NAMES.setdefault(text, name if package == PACKAGE else f"{package}:{name}")
    return text


NAMES: dict[str, str] = {}  # a loaded statement's text -> its name, for errors that must name the statement


def name_of(statement: object) -> str:
    """How an error names `statement`: its file's name when it was loaded here, else its first line (200 characters
    at most)."""
    if isinstance(statement, bytes):
        text = statement.decode("utf-8", "replace")
    elif isinstance(statement, str):
        text = statement
    else:  # a composed statement (psycopg.sql)
        try:
            text = statement.as_string(None)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - naming a statement must never hide the error being named
            text = str(statement)
    if text in NAMES:
        return f"{NAMES[text]} (blobgc/sql/{NAMES[text]}.sql)" if ":" not in NAMES[text] else NAMES[text]
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("--")), "")
    return repr(first[:200])


def one_row(cursor: psycopg.Cursor[Row]) -> Row:
    """The row a statement always returns (an aggregate, an upsert's RETURNING): none is a bug, raised as such."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("the statement returned no row where it always returns one")
    return row
