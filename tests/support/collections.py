"""A second application, shaped unlike the demo, for the collections tests (docs/reference.md §6).

`shop_<n>.upload` has bigint ids, objects keyed by two columns (`uploads/{sha}.{ext}`, content
addressed: two uploads of the same bytes share one object) plus a per-row thumbnail
(`upload-thumbs/{id}.jpg`), and references of every awkward kind: a nullable foreign key holding
NULLs, one declared ON DELETE CASCADE, one to a unique column that is not the primary key, and a
polymorphic table that only an extra reference query can follow.
"""
from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from blobgc.core.collections import bind, parse_collections

SCHEMA_SQL = """
CREATE SCHEMA {s};
CREATE TABLE {s}.upload (
    id          bigint PRIMARY KEY,
    sha         text NOT NULL,
    ext         text NOT NULL,
    size_bytes  bigint,
    token       uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON {s}.upload (sha, ext);
CREATE TABLE {s}.product (id bigint PRIMARY KEY, photo_id bigint REFERENCES {s}.upload (id));
CREATE TABLE {s}.gallery_item (id bigserial PRIMARY KEY,
                               upload_id bigint NOT NULL REFERENCES {s}.upload (id) ON DELETE CASCADE);
CREATE TABLE {s}.share (id bigserial PRIMARY KEY, upload_token uuid REFERENCES {s}.upload (token));
CREATE TABLE {s}.attachment (id bigserial PRIMARY KEY, target_kind text NOT NULL, target_id bigint);
"""


def new_schema() -> str:
    return f"shop_{uuid.uuid4().hex[:8]}"


def create_shop(conn, schema: str) -> None:
    with conn.transaction():
        conn.execute(SCHEMA_SQL.format(s=schema))


def shop_yaml(schema: str, bucket: str, *, name: str = "shop_uploads", grace_hours: float = 24,
              prefix: str = "uploads/", thumbs: str = "upload-thumbs/", extra: str = "") -> str:
    return f"""
collections:
  {name}:
    table: {schema}.upload
    id: id
    created_at: created_at
    size: size_bytes
    bucket: {bucket}
    keys:
      - "{prefix}{{sha}}.{{ext}}"
      - "{thumbs}{{id}}.jpg"
    grace_hours: {grace_hours}
    references:
      - "SELECT target_id FROM {schema}.attachment WHERE target_kind = 'upload'"
{extra}"""


def write_collections(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "collections.yaml"
    path.write_text(text)
    return path


def bound_shop(conn, schema: str, bucket: str, *, name: str = "shop_uploads", **kwargs):
    collection = parse_collections(shop_yaml(schema, bucket, name=name, **kwargs))[name]
    return bind(conn, collection, default_bucket=bucket)


def add_upload(conn, s3, schema: str, bucket: str, upload_id: int, content: bytes, *, ext: str = "png",
               thumbnail: bool = True, prefix: str = "uploads/", thumbs: str = "upload-thumbs/") -> dict:
    """One upload: its row, its content object (shared by equal content) and its thumbnail."""
    sha = hashlib.sha256(content).hexdigest()
    with conn.transaction():
        token = conn.execute(f"INSERT INTO {schema}.upload (id, sha, ext, size_bytes) VALUES (%s, %s, %s, %s) "
                             "RETURNING token", (upload_id, sha, ext, len(content))).fetchone()[0]
    s3.put_object(Bucket=bucket, Key=f"{prefix}{sha}.{ext}", Body=content)
    if thumbnail:
        s3.put_object(Bucket=bucket, Key=f"{thumbs}{upload_id}.jpg", Body=b"t" * 10)
    return {"id": upload_id, "sha": sha, "ext": ext, "token": token, "key": f"{prefix}{sha}.{ext}",
            "thumb": f"{thumbs}{upload_id}.jpg"}


def user_columns(conn, schema: str) -> list[tuple]:
    """information_schema.columns of the application's tables: what blobgc must never change."""
    return conn.execute("SELECT table_name, column_name, data_type, is_nullable, column_default "
                        "FROM information_schema.columns WHERE table_schema = %s ORDER BY 1, 2", (schema,)).fetchall()


def backdate_marks(conn, name: str, age: str) -> None:
    """As if an earlier mark had found the collection's unused rows `age` ago (blobgc's own state)."""
    with conn.transaction():
        conn.execute(f"UPDATE blobgc.mark_{name} SET unused_since = now() - %s::interval", (age,))


def backdate_uploads(conn, schema: str, ids: list[int], age: str) -> None:
    with conn.transaction():
        conn.execute(f"UPDATE {schema}.upload SET created_at = now() - %s::interval WHERE id = ANY(%s)", (age, ids))
