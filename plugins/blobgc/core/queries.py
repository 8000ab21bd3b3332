"""Load the SQL files under include/sql/<area>/<verb>_<object>.sql."""
from __future__ import annotations

import functools
import os
from pathlib import Path


def sql_root() -> Path:
    """include/sql, next to plugins/ (the same layout in the repo and in the Airflow image)."""
    override = os.environ.get("BLOBGC_SQL_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[3] / "include" / "sql"


@functools.cache
def load(name: str) -> str:
    """The text of include/sql/<name>.sql, e.g. load("sweep/claim_unused_blobs")."""
    path = sql_root() / f"{name}.sql"
    return path.read_text()
