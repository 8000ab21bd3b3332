"""Seed 002's key layout: a paste content's object, `pastes/{content_hash}`, accounted for by `app.content`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from blobgc.core import queries
from blobgc.core.keys import KeyLayout, Verdict
from blobgc.core.objects import ObjectStore


@contextmanager
def hold_unneeded_contents(
    layout: KeyLayout, conn: psycopg.Connection, _s3: ObjectStore, _bucket: str, keys: list[str]
) -> Iterator[Verdict]:
    """Seed 002's guard: yield the `pastes/` keys whose content was created again, hold the rest.

    Each hash gets an uncommitted placeholder row: where a committed row exists (the content was
    created again) the key is kept; where a writer is creating it right now, the insert waits for
    that writer and then keeps the key. While the placeholders exist, a new writer of a held hash
    waits on them. They live in a savepoint that is always rolled back after the deletion: the
    waiting writer then finds no row, creates the content anew and uploads the object again.
    """
    ids = {key: layout.identity(key) for key in keys}
    hashes = sorted({h for h in ids.values() if h is not None})
    with conn.transaction(force_rollback=True):
        held = {
            row[0]
            for row in conn.execute(
                queries.load("guards/insert_content_placeholders", "blobgc.kinds.pastes"), {"hashes": hashes}
            )
        }
        yield Verdict({key for key, h in ids.items() if h is not None and h not in held}, layout.unreadable(ids))


# Any text content hash (seed 002's own example is `abc123`), not only a sha256 hex digest.
PASTE_CONTENTS = KeyLayout(
    "app.content", "pastes/", 1, re.compile(r"pastes/(?P<id>.+)", re.DOTALL), hold_unneeded_contents
)


def content_key(digest: str) -> str:
    """The object of a paste's content: `pastes/{content_hash}`."""
    return f"pastes/{digest}"
