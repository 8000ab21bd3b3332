"""Seed 001 §5, "cleaning after the cleaning": the buckets against the database, by listing or from inventories.

Each installed kind describes the keys it owns bucket-wide (`KEY_SOURCES`): its prefix, how a key maps to
the row that accounts for it, and how it shards; a collection of the collections file (docs/reference.md §6)
other than app_blob is reconciled under the literal prefixes of its key templates. The modules:

- `shards`: the parts a listing run reconciles, found by walking the buckets (`plan_listing`), and their results;
- `listing`: one shard listed page by page after its checkpoint, each page checked against the database;
- `from_inventory`: one bucket reconciled from its S3 Inventory report instead, anti-joined in DuckDB;
- `checks`: what both share: the age floor, which keys a row accounts for, and how findings are recorded;
- `planning`: a run's parts from its Params; `report`: its totals and what it did not plan, from its checkpoints.
"""

from __future__ import annotations

import psycopg

from blobgc.core.catalog import missing_tables
from blobgc.core.keys import KeySource, reconciled_sources
from blobgc.kinds import KINDS  # noqa: F401 - installs every kind, whose key sources reconcile lists

# every installed kind's bucket-wide key source (blobgc.kinds installs them), in listing order
KEY_SOURCES: tuple[KeySource, ...] = reconciled_sources()
SOURCES_BY_NAME = {s.name: s for s in KEY_SOURCES}


def present_sources(conn: psycopg.Connection) -> tuple[KeySource, ...]:
    """The seed sources whose table this database has: a deployment without pastes (say) has no pastes/ source,
    and keys there are unknown to it like any other folder's."""
    missing = set(missing_tables(conn, [s.name for s in KEY_SOURCES]))
    return tuple(s for s in KEY_SOURCES if s.name not in missing)
