"""Seed 000's key layout: a blob's objects, `blobs/{id}/raw` and `blobs/{id}/thumbnail`, accounted for by `app.blob`."""

from __future__ import annotations

import re

from blobgc.core.keys import KeyLayout, row_guard

# Any text id (docs/reference.md §3: app.blob.id is text): the fixed suffix makes the reading unique, `/` included.
BLOB_OBJECTS = KeyLayout(
    "app.blob",
    "blobs/",
    1,
    re.compile(r"blobs/(?P<id>.+)/(?:raw|thumbnail)", re.DOTALL),
    row_guard("app", "blob", "id"),
)


def blob_keys(blob_id: str) -> tuple[str, str]:
    """The objects a blob owns: its raw upload and its thumbnail (which the application may never have made)."""
    return f"blobs/{blob_id}/raw", f"blobs/{blob_id}/thumbnail"
