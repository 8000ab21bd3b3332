"""The upload protocol that never orphans an object: owe it first, upload it, then account for it.

A writer (the application's upload, the crawler) first records the keys it is about to upload as
owed to a cleaning DAG (an *intent* in the outbox), then uploads, then, in one transaction, inserts
the rows that account for the objects and cancels the intent. A crash anywhere in between leaves
the keys owed: the cleaning DAG's drain deletes them, unless (its guard sees) a row claims them. An
intent is due to the drain only after `blobgc.core.outbox.UPLOAD_INTENT_HOLD` (an hour), so a drain never
claims the intent of a writer still uploading.

A kind whose rows are bound to files a drain may be deleting binds them under a lock its guard takes too
(the images kind: `blobgc.kinds.images.rows`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg

from blobgc.core.objects import ObjectStore, delete_objects_in_batches
from blobgc.core.outbox import cancel_upload_intent, owe_upload_intent

log = logging.getLogger(__name__)


class Rejected(Exception):
    """Input refused for good (a URL that is no image, a decompression bomb, an oversize file): recorded, not retried.

    `kind` says why, in a word a report can count (not_an_image, bomb, oversize, refused_address, ...).
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def upload_with_intent(
    conn: psycopg.Connection,
    s3: ObjectStore,
    *,
    bucket: str,
    bodies: dict[str, bytes],
    content_type: str,
    owed_to: str,
    source: str,
    run_id: str,
    account: Callable[[psycopg.Connection], object],
) -> None:
    """Upload `bodies` (key -> bytes) so that none can be orphaned; `account(conn)` inserts the rows that
    account for them, in the transaction that cancels the intent.

    If an upload fails, what was uploaded is deleted now if S3 lets us (and the intent cancelled);
    otherwise it stays owed to `owed_to`'s drain. The error is raised either way.
    """
    keys = list(bodies)
    log_id = owe_upload_intent(
        conn,
        dag_id=owed_to,
        run_id=f"intent:{run_id}",
        source=source,
        bucket=bucket,
        keys=keys,
        sizes=[len(b) for b in bodies.values()],
    )
    try:
        for key, body in bodies.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type)
    except Exception:
        try:
            cleaned = not delete_objects_in_batches(s3, bucket, keys).failed
        except Exception:  # noqa: BLE001 - S3 is failing; the intent keeps the keys owed
            cleaned = False
        if cleaned:
            with conn.transaction():
                cancel_upload_intent(conn, log_id)
        raise
    with conn.transaction():
        account(conn)
        cancel_upload_intent(conn, log_id)
