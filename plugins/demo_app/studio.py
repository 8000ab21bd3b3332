"""A second demo application, shaped unlike seed 000's blobs, that blobgc collects as the collection
`studio_assets` of include/collections.yaml (docs/reference.md §6) without a line of blobgc knowing it.

`studio.asset` rows have uuid ids. Their objects are content addressed, keyed by two columns,
`studio/{checksum}.{kind}` (two assets with the same bytes share one object), plus a per-asset preview
`studio-previews/{id}.jpg`. Projects reference an asset as their cover (nullable, ON DELETE SET NULL)
and clips reference assets (ON DELETE CASCADE from their project). The schema is the demo app's own
migration (plugins/demo_app/migrations).
"""

from __future__ import annotations

import hashlib

import psycopg

from demo_app import statements

ASSET_KEY = "studio/{checksum}.{kind}"
PREVIEW_KEY = "studio-previews/{id}.jpg"


def upload_asset(
    conn: psycopg.Connection, s3, bucket: str, data: bytes, *, kind: str, preview: bytes | None = None
) -> str:
    """Store the asset's content object (once per distinct content) and its preview, then insert its row."""
    checksum = hashlib.sha256(data).hexdigest()
    s3.put_object(Bucket=bucket, Key=ASSET_KEY.format(checksum=checksum, kind=kind), Body=data)
    with conn.transaction():
        asset_id = conn.execute(
            statements.load("demo/insert_studio_asset"), {"checksum": checksum, "kind": kind, "bytes": len(data)}
        ).fetchone()[0]
    if preview is not None:
        s3.put_object(Bucket=bucket, Key=PREVIEW_KEY.format(id=asset_id), Body=preview)
    return str(asset_id)


def use_as_cover(conn: psycopg.Connection, project_id: int, asset_id: str | None) -> None:
    with conn.transaction():
        conn.execute(statements.load("demo/upsert_studio_project"), {"id": project_id, "cover": asset_id})


def add_clip(conn: psycopg.Connection, project_id: int, asset_id: str) -> None:
    with conn.transaction():
        conn.execute(statements.load("demo/insert_studio_clip"), {"project_id": project_id, "asset_id": asset_id})
