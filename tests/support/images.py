"""Seed 001's test kit: a photo server, image settings, offers, and crawl/cleanup shortcuts."""
from __future__ import annotations

import os
from datetime import timedelta

import pytest

from blobgc.kinds.images.crawler import crawl
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.runs import RunRef, ensure_run
from demo_app.downloads import DownloadPolicy, fetching
from demo_app.images import CLEANUP_DAG, ImageSettings, storer
from tests.photo_server import PhotoServer
from tests.helpers import NOW


LOOPBACK = ["127.0.0.0/8"]  # the photo server's network, opened explicitly


SIZES = {"orig": 0, "big": 1280, "medium": 640, "thumb": 160}


FAST = DownloadPolicy(connect_timeout=2, read_timeout=0.5, max_bytes=1024 * 1024, attempts=3, backoff=0.05,
                      allowed_networks=LOOPBACK)


@pytest.fixture
def photos():
    with PhotoServer() as server:
        yield server


@pytest.fixture
def settings(bucket) -> ImageSettings:
    return ImageSettings(bucket=bucket, sizes=SIZES)


@pytest.fixture
def offers(conn):
    with conn.transaction():
        conn.execute("INSERT INTO app.offer (id, title) SELECT g, 'offer ' || g FROM generate_series(1, 5) g")
    return [1, 2, 3, 4, 5]


def run_crawl(conn, s3, settings, items, *, cache_days: int = 14, policy: DownloadPolicy = FAST):
    """The crawler as blobgc_crawler wires it: the application's downloader and store around the collector."""
    with fetching(policy) as fetch:
        return crawl(conn, items, fetch=fetch, store=storer(s3, settings, run_id="crawl"),
                     seen_since=NOW - timedelta(days=cache_days))


def image_rows(conn):
    return conn.execute("SELECT image_id, offer_id, num FROM app.image ORDER BY id").fetchall()


def drain(conn, s3):
    run = RunRef(CLEANUP_DAG, f"drain-{os.urandom(4).hex()}")
    ensure_run(conn, run)
    return delete_owed_objects(conn, s3, run)


def age_rows(conn, days: int) -> None:
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() - %s * interval '1 day'", (days,))
