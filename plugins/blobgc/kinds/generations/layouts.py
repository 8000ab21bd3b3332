"""Seed 003's key layout: a mail blob's object, `mail/{blob_id}`, accounted for by `gen.blob`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from blobgc.core import locks, queries
from blobgc.core.keys import KeyLayout, Verdict
from blobgc.core.objects import ObjectStore


@contextmanager
def hold_unreferenced_mail(
    layout: KeyLayout, conn: psycopg.Connection, _s3: ObjectStore, _bucket: str, keys: list[str]
) -> Iterator[Verdict]:
    """Seed 003's guard: yield the `mail/` keys whose blob has a row now, holding the others.

    Takes the blobs' generations alone until the draining transaction ends, as the collector does:
    a writer storing into one of them is waited for, and its row is then seen; a later writer waits
    until the deletion is done.
    """
    ids = {key: layout.identity(key) for key in keys}
    for generation in sorted({g for i in ids.values() if i is not None and (g := generation_of(i)) is not None}):
        locks.hold_generation_alone(conn, generation)
    wanted = sorted({i for i in ids.values() if i is not None})
    existing = (
        {
            r[0]
            for r in conn.execute(
                queries.load("guards/select_existing_mail_blobs", "blobgc.kinds.generations"), {"ids": wanted}
            )
        }
        if wanted
        else set()
    )
    yield Verdict(
        {key for key, blob_id in ids.items() if blob_id is not None and blob_id in existing}, layout.unreadable(ids)
    )


MAIL_BLOBS = KeyLayout("gen.blob", "mail/", 1, re.compile(r"mail/(?P<id>.+)", re.DOTALL), hold_unreferenced_mail)


def mail_key(blob_id: str) -> str:
    return f"mail/{blob_id}"


def mail_blob_id(content_hash: str, generation: int) -> str:
    """The id of a blob of `generation` holding content with this sha256 hex digest."""
    return f"{content_hash}-g{generation}"


def generation_of(blob_id: str) -> int | None:
    """The generation embedded in a blob id made by `mail_blob_id`, or None for any other id."""
    digest, sep, generation = blob_id.rpartition("-g")
    return int(generation) if sep and len(digest) == 64 and generation.isdigit() else None
