"""Seed 000's blobs: `app.blob` rows and their objects, collected by mark and sweep as the collection app_blob.

app_blob is an ordinary collection of the collections file in *column mode*: it keeps its mark state in
app.blob's own columns (`unused`, `updated_at`, and `visibility` for page usages), as seed 000 does. Its folder
holds the key layout (`layouts`), the statements of that mode (`sql/mark`, `sql/sweep`, `sql/restore`), the
page polling the mark runs first (`pages`), and reconcile's statements for `blobs/` (`sql/reconcile`). Mark,
sweep, reconcile and restore themselves collect any collection (`blobgc.collectors`).
"""

from __future__ import annotations

from blobgc.core.collections import BoundCollection, Collection, ColumnMode
from blobgc.core.keys import KeySource
from blobgc.core.queries import Statement
from blobgc.core.registry import Kind
from blobgc.kinds.blobs.layouts import BLOB_OBJECTS, blob_keys

SQL = __name__

# app.blob as the collections file declares it (docs/reference.md §6's example; include/collections.yaml)
APP_BLOB = Collection(
    name="app_blob",
    table="app.blob",
    id="id",
    created_at="created_at",
    size="size_bytes",
    keys=["blobs/{id}/raw", "blobs/{id}/thumbnail"],
)
PAGE_USAGES = "app.page_using_blob"
APP_BLOB_MODE = ColumnMode(
    APP_BLOB,
    what="seed 000's objects",
    source=BLOB_OBJECTS.source,
    column_types={"id": "text", "created_at": "timestamp with time zone", "size_bytes": "bigint"},
    statements={
        "mark/select_marks": Statement("mark/select_blob_marks", SQL),
        "mark/count_marks": Statement("mark/count_blob_marks", SQL),
        "mark/update_marks": Statement("mark/update_blob_marks", SQL),
        "sweep/select_unused_rows": Statement("sweep/select_unused_blobs", SQL),
        "sweep/delete_rows": Statement("sweep/delete_blobs", SQL),
        "sweep/select_unreferenced_rows": Statement("sweep/select_unreferenced_blobs", SQL),
        "sweep/update_rows_used": Statement("sweep/update_blobs_used", SQL),
        "restore/insert_rows": Statement("restore/insert_blob_rows", SQL),
    },
    # the mark forgets stale page usages first (FOR UPDATE, then DELETE)
    mark_tables={PAGE_USAGES: ("UPDATE", "DELETE")},
)


def bound_app_blob(bucket: str) -> BoundCollection:
    """app_blob bound without asking the catalog: its columns are docs/reference.md §3's."""
    return APP_BLOB_MODE.bound(bucket)


KIND = Kind(
    "blobs",
    layouts=(BLOB_OBJECTS,),
    reconciled=(
        KeySource(
            BLOB_OBJECTS,
            Statement("reconcile/select_existing_blobs", SQL),
            Statement("reconcile/select_blob_rows_in_range", SQL),
            lambda ref, _: [blob_keys(ref)[0]],
            Statement("reconcile/select_blob_shards", SQL),
            Statement("reconcile/copy_blob_keys", SQL),
        ),
    ),
    reconciled_tables={"app.blob": ("SELECT",)},
    column_modes=(APP_BLOB_MODE,),
    not_restorable={
        "app.blob": "app.blob rows deleted before blobgc logged row images (migration 0007) are not in the log; "
        "the objects are restored"
    },
)
