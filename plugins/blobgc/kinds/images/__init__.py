"""Seed 001's images: the crawler downloads and uploads partner photos once, the cleaner removes unbound ones.

Its folder: the key layout and the drain's guard (`layouts`), the crawler (`crawler`), the cleaner
(`cleanup`), the rows that bind files (`rows`), its statements (`sql/`), and what its DAGs need, below.
"""

from __future__ import annotations

from blobgc.core.keys import KeySource
from blobgc.core.queries import Statement
from blobgc.core.registry import DagNeeds, Kind
from blobgc.kinds.images.layouts import IMAGE_FILES

SQL = __name__

KIND = Kind(
    "images",
    layouts=(IMAGE_FILES,),
    reconciled=(
        KeySource(
            IMAGE_FILES,
            Statement("reconcile/select_existing_images", SQL),
            Statement("reconcile/select_image_rows_in_range", SQL),
            lambda ref, known: known or [],
            Statement("reconcile/select_image_shards", SQL),
            Statement("reconcile/copy_image_keys", SQL),
        ),
    ),
    reconciled_tables={"app.image": ("SELECT",)},
    not_restorable={
        "app.image": "app.image rows: image rows are not kept in the log (their offer binding and hashes are gone); "
        "the image files are restored"
    },
    dags={
        "blobgc_image_cleanup": DagNeeds(
            "seed 001's crawled images",
            {"app.image": ("SELECT", "UPDATE", "DELETE")},
            plan_sizes="the sizes recorded when the files were uploaded (blobgc.image_file; older files: unknown)",
            module=f"{__name__}.dag",
            summary="removes unbound crawled images (seed 001: app.image)",
        ),
        "blobgc_crawler": DagNeeds(
            "seed 001's partner photos",
            {
                "app.offer": ("SELECT",),
                "app.image": ("SELECT", "INSERT", "UPDATE"),
                "app.crawl_request": ("SELECT", "UPDATE"),
            },
            sequences=("app.image_id_seq",),  # app.image.id is a bigserial
        ),
    },
)
