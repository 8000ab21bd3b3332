"""The demo application's own SQL statements, shipped beside it in demo_app/sql/ (blobgc's are in blobgc/sql/)."""

from __future__ import annotations

from blobgc.core import queries


def load(name: str) -> str:
    """The text of demo_app/sql/<name>.sql, e.g. load("demo/insert_post")."""
    return queries.load(name, package="demo_app")
