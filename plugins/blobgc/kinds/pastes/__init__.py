"""Seed 002's pastes: `app.paste` expires, `app.content` counts its pastes, `pastes/{hash}` holds the content.

Its folder: the key layout and the drain's guard (`layouts`), the collector (`expiry`), its statements
(`sql/`), and what its DAG `blobgc_paste_expiry` needs, declared below.
"""

from __future__ import annotations

from blobgc.core.keys import KeySource
from blobgc.core.queries import Statement
from blobgc.core.registry import ALL_DML, DagNeeds, Kind
from blobgc.kinds.pastes.layouts import PASTE_CONTENTS, content_key

SQL = __name__

KIND = Kind(
    "pastes",
    layouts=(PASTE_CONTENTS,),
    reconciled=(
        KeySource(
            PASTE_CONTENTS,
            Statement("reconcile/select_existing_contents", SQL),
            Statement("reconcile/select_content_rows_in_range", SQL),
            lambda ref, _: [content_key(ref)],
            Statement("reconcile/select_content_shards", SQL),
            Statement("reconcile/copy_content_keys", SQL),
        ),
    ),
    # the drain's guard inserts placeholder rows
    reconciled_tables={"app.content": ("SELECT", "INSERT")},
    not_restorable={
        "app.content": "app.content rows: the expired app.paste rows that referenced them are not in the log, and "
        "a content row without its pastes would be expired again; the objects are restored"
    },
    dags={
        "blobgc_paste_expiry": DagNeeds(
            "seed 002's pastes",
            {"app.paste": ("SELECT", "UPDATE", "DELETE"), "app.content": ALL_DML},
            plan_sizes="app.content.size_bytes",
            module=f"{__name__}.dag",
            summary="expires pastes (seed 002: app.paste, app.content, Redis cache keys)",
        )
    },
)
