"""Seed 003's generations: mail blobs in schema `gen`, collected a generation at a time behind a bloom filter.

Its folder: the key layout and the drain's guard (`layouts`), the collector (`collector`), its statements
(`sql/`), and what its DAG `blobgc_generations` needs, below.
"""

from __future__ import annotations

from blobgc.core.keys import KeySource
from blobgc.core.queries import Statement
from blobgc.core.registry import DagNeeds, Kind
from blobgc.kinds.generations.layouts import MAIL_BLOBS, mail_key

SQL = __name__

KIND = Kind(
    "generations",
    layouts=(MAIL_BLOBS,),
    reconciled=(
        KeySource(
            MAIL_BLOBS,
            Statement("reconcile/select_existing_mail_blobs", SQL),
            Statement("reconcile/select_mail_rows_in_range", SQL),
            lambda ref, _: [mail_key(ref)],
            Statement("reconcile/select_mail_shards", SQL),
            Statement("reconcile/copy_mail_keys", SQL),
        ),
    ),
    reconciled_tables={"gen.blob": ("SELECT",)},
    not_restorable={
        "gen.blob": "gen.blob rows: the references whose deletion made the blob collectable are not in the log, so "
        "a restored row would be collected again; the mail objects are restored"
    },
    dags={
        "blobgc_generations": DagNeeds(
            "seed 003's generations of mail blobs",
            {
                "gen.generation": ("SELECT", "INSERT"),
                "gen.blob": ("SELECT", "DELETE"),
                "gen.reference": ("SELECT",),
                "gen.deletion": ("SELECT", "DELETE"),
            },
            plan_sizes="gen.blob.size_bytes",
            module=f"{__name__}.dag",
            summary="generation-based GC with a bloom filter (seed 003: schema gen)",
        )
    },
)
