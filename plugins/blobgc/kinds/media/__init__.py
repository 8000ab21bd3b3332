"""Seed 004's S3-only media store: staging uploads, masters and their thumbnails, and no table at all.

Its folder: the key layouts and the thumbnails' guard (`layouts`), the cleaners (`cleanup`), the thumbnail
job queue the application shares (`thumbnail_jobs`), and what its DAGs need, below.
"""

from __future__ import annotations

from blobgc.core.registry import DagNeeds, Kind
from blobgc.kinds.media.layouts import MEDIA_STAGING, MEDIA_THUMBNAILS

LISTED = "the store's listing when the plan was made"

KIND = Kind(
    "media",
    layouts=(MEDIA_THUMBNAILS, MEDIA_STAGING),
    not_restorable={
        "media.staging": "no rows: seed 004's store has no database; the staging objects are restored",
        "media.thumbnails": "no rows: seed 004's store has no database; the thumbnails are restored",
    },
    dags={
        "blobgc_media_staging": DagNeeds(
            "seed 004's staging uploads",
            {},
            plan_sizes=LISTED,
            module=f"{__name__}.dag",
            summary="deletes abandoned staging uploads of the S3-only media store (seed 004)",
        ),
        "blobgc_media_thumbnails": DagNeeds("seed 004's thumbnails", {}, plan_sizes=LISTED),
    },
)
