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
        return sql_root(package).joinpath(f"{name}.sql").read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"no SQL statement {name!r} in package {package!r} ({package}/sql/{name}.sql): "
            "is the package installed whole, with its package data?"
        ) from error


def one_row(cursor: psycopg.Cursor[Row]) -> Row:
    """The row a statement always returns (an aggregate, an upsert's RETURNING): none is a bug, raised as such."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("the statement returned no row where it always returns one")
    return row
