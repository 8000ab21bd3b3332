"""Seed 003's application write path: a deduplicated mail blob store with reference generations (Apache James
ADR 39).

`store_blob` deduplicates content within the current reference generation only: a blob id is
`{sha256 of the content}-g{generation}` (`blobgc.kinds.generations.layouts.mail_blob_id`), so equal content stored in
two generations makes two blobs. Deleting a `gen.reference` row records a `gen.deletion` row in the
same transaction (a trigger), so no caller can forget one.

Writers hold the generation they write into shared until they commit (`blobgc.core.locks`), and
check after taking it that it is still current; blobgc_generations collects a generation holding it
alone. `add_reference` (a second owner of an existing blob, such as a copied mail) takes the same
lock on the blob's own generation, whatever its age, and fails if the blob is gone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import psycopg

from blobgc.core import queries
from blobgc.core.locks import hold_generation_shared
from blobgc.kinds.generations.layouts import mail_blob_id, mail_key
from demo_app import statements


class WrongIsolation(RuntimeError):
    """A writer in an isolation level that cannot see generations opened meanwhile."""


class BlobGone(LookupError):
    """The blob a new reference was to point at has been collected; store the content again instead."""


@dataclass(frozen=True)
class StoredBlob:
    blob_id: str
    generation: int
    created: bool  # False: this generation already had the content, nothing was uploaded


def lock_current_generation(conn: psycopg.Connection) -> int:
    """Hold the current generation (shared, until the transaction ends) and return it.

    Re-reads the current generation after taking the lock and follows it if it moved, so the
    generation returned was current while already held: no collector can be working on it.
    """
    current, isolation = conn.execute(
        queries.load("generations/select_current_generation", "blobgc.kinds.generations")
    ).fetchone()
    if isolation != "read committed":
        raise WrongIsolation(
            f"blob writers must run at READ COMMITTED, not {isolation}: the generation "
            "check after the lock must see generations opened meanwhile"
        )
    if current is None:
        conn.execute(statements.load("generations/insert_first_generation"))
        current = 1
    while True:
        hold_generation_shared(conn, current)
        latest = conn.execute(
            queries.load("generations/select_current_generation", "blobgc.kinds.generations")
        ).fetchone()[0]
        if latest == current:
            return current
        current = latest


def store_blob(conn: psycopg.Connection, s3, *, bucket: str, owner_id: str, content: bytes) -> StoredBlob:
    """Store `content` for `owner_id` in the current generation, deduplicated within that generation.

    One transaction: hold the current generation, insert `gen.blob` (a new blob only), upload
    `mail/{blob_id}` when the blob is new, insert the `gen.reference`. A failed upload leaves no
    row; a concurrent writer of the same content waits on the blob row and then reuses it.
    """
    digest = hashlib.sha256(content).hexdigest()
    with conn.transaction():
        generation = lock_current_generation(conn)
        blob_id = mail_blob_id(digest, generation)
        created = (
            conn.execute(
                statements.load("generations/insert_blob"),
                {"blob_id": blob_id, "generation": generation, "size_bytes": len(content)},
            ).fetchone()
            is not None
        )
        if created:
            s3.put_object(Bucket=bucket, Key=mail_key(blob_id), Body=content)
        conn.execute(
            statements.load("generations/insert_reference"),
            {"owner_id": owner_id, "blob_id": blob_id, "generation": generation},
        )
    return StoredBlob(blob_id, generation, created)


def add_reference(conn: psycopg.Connection, *, owner_id: str, blob_id: str) -> int:
    """Make `owner_id` a further owner of an existing blob (a copied or forwarded mail); returns its generation.

    Holds the blob's generation (shared) so that no collection of it runs meanwhile, then the blob
    row itself (in that order: holding the row while waiting for the generation would deadlock with
    a collector deleting it). Raises `BlobGone` if the blob was collected: the caller stores the
    content again.
    """
    with conn.transaction():
        row = conn.execute(statements.load("generations/select_blob_generation"), {"blob_id": blob_id}).fetchone()
        if row is None:
            raise BlobGone(blob_id)
        hold_generation_shared(conn, row[0])
        # the blob may have been collected while we waited for the lock: look again, holding its row
        row = conn.execute(statements.load("generations/lock_blob"), {"blob_id": blob_id}).fetchone()
        if row is None:
            raise BlobGone(blob_id)
        conn.execute(
            statements.load("generations/insert_reference"),
            {"owner_id": owner_id, "blob_id": blob_id, "generation": row[0]},
        )
    return row[0]


def delete_reference(conn: psycopg.Connection, *, owner_id: str, blob_id: str) -> bool:
    """The application deleting a reference; the trigger records the deletion in the same transaction."""
    with conn.transaction():
        return (
            conn.execute(
                statements.load("generations/delete_reference"), {"owner_id": owner_id, "blob_id": blob_id}
            ).rowcount
            > 0
        )
