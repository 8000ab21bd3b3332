"""Seed 004's test kit: users, real images, the media settings and buckets, uploads through presigned POSTs."""
from __future__ import annotations

import io
import uuid

import pytest
import requests
from PIL import Image

from blobgc.core.outbox import DrainResult, delete_owed_objects
from blobgc.core.plans import PLAN_MAX_AGE_HOURS, fix_plan, owe_planned_objects
from blobgc.core.runs import RunRef, ensure_run
from blobgc.core.settings import MediaSettings
from blobgc.kinds.media.thumbnail_jobs import DEAD_LETTERS, PROCESSING, QUEUE, QUEUED
from blobgc.core.gate import let_through
from demo_app.media import presign_upload


USER = "0001000000000002"


OTHER = "0001000000000003"


DAY = 24 * 3600


def jpeg(width: int = 800, height: int = 600, color=(200, 80, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "JPEG", quality=85)
    return buffer.getvalue()


def png(width: int = 300, height: int = 300) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGBA", (width, height), (10, 200, 30, 128)).save(buffer, "PNG")
    return buffer.getvalue()


def heic(width: int = 900, height: int = 600, color: tuple[int, int, int] = (30, 140, 220)) -> bytes:
    """A real HEIC photo of one colour, encoded by pillow-heif (libheif with x265)."""
    import pillow_heif

    buffer = io.BytesIO()
    pillow_heif.from_pillow(Image.new("RGB", (width, height), color)).save(buffer, quality=70)
    return buffer.getvalue()


@pytest.fixture
def media(s3, redis):
    """A store of the test's own: buckets `{prefix}images` and `{prefix}profiles`, an empty queue."""
    settings = MediaSettings(bucket_prefix=f"test-{uuid.uuid4().hex[:10]}-", monthly_limit_bytes=2_000_000,
                             file_limit_bytes=1_000_000)
    for bucket in (settings.images_bucket, settings.profiles_bucket):
        s3.create_bucket(Bucket=bucket)
    redis.delete(QUEUE, PROCESSING, DEAD_LETTERS, QUEUED)
    yield settings
    redis.delete(QUEUE, PROCESSING, DEAD_LETTERS, QUEUED)
    for bucket in (settings.images_bucket, settings.profiles_bucket):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        s3.delete_bucket(Bucket=bucket)


def keys(s3, bucket: str, prefix: str = "") -> list[str]:
    return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])]


def upload(post: dict, body: bytes, filename: str = "photo.jpg") -> requests.Response:
    """What the browser does with a presigned POST: a multipart form straight to S3."""
    return requests.post(post["url"], data=post["fields"], files={"file": (filename, body)}, timeout=30)


def uploaded(s3, media: MediaSettings, body: bytes, filename: str = "photo.jpg", user: str = USER,
             declared: int | None = None) -> str:
    post = presign_upload(s3, media, user, filename, declared or len(body))
    response = upload(post, body, filename)
    assert response.status_code in (200, 201, 204), response.text
    return post["key"]


def run_ref(conn, dag_id: str, dry_run: bool = False) -> RunRef:
    """A run as a DAG task gets it: recorded, with its reference time (the database's now()), making its own plan."""
    run = ensure_run(conn, RunRef(dag_id, f"test-{uuid.uuid4().hex[:8]}", dry_run))
    fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
    return run


def delete_planned(conn, s3, run: RunRef) -> DrainResult:
    """What the DAG does once the gate let the run's plan through: owe the planned objects, then drain them."""
    let_through(conn, run, approved_by="tests")
    owe_planned_objects(conn, run)
    return delete_owed_objects(conn, s3, run)


def age_queued_entry(redis, bucket: str, key: str, seconds: float) -> None:
    """As if the master's job had been queued `seconds` ago (and lost since)."""
    now, micros = redis.time()
    redis.hset(QUEUED, f"{bucket}/{key}", f"{now + micros / 1e6 - seconds:.3f}")
