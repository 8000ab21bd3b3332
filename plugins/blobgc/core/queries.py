"""Load SQL statements shipped as package data: `<package>/sql/<area>/<verb>_<object>.sql`.

blobgc's statements live in `blobgc/sql/` (migrations in `blobgc/sql/migrations/`), read through
`importlib.resources`, so they are found the same way in the source tree (plugins/ on the path), in an
installed wheel, and in a zipped or copied deployment. An application beside blobgc (the demo's
`demo_app`) keeps its own under its own package and loads them with `load(name, package=...)`.
"""

from __future__ import annotations

import functools
from importlib import resources
from importlib.resources.abc import Traversable

PACKAGE = "blobgc"


def sql_root(package: str = PACKAGE) -> Traversable:
    """The `sql` folder of `package` (blobgc's by default), as package data."""
    return resources.files(package).joinpath("sql")


@functools.cache
def load(name: str, package: str = PACKAGE) -> str:
    """The text of `<package>/sql/<name>.sql`, e.g. load("sweep/claim_unused_blobs")."""
    try:
        return sql_root(package).joinpath(f"{name}.sql").read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise FileNotFoundError(
            f"no SQL statement {name!r} in package {package!r} ({package}/sql/{name}.sql): "
            "is the package installed whole, with its package data?"
        ) from error
