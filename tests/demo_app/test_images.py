"""demo_app.images: seed 001's image pre-upload and attach, as the application calls them."""
from __future__ import annotations

import pytest

from blobgc.kinds.images.layouts import image_keys
from demo_app.image_processing import ImageRejected
from demo_app.images import ImageSettings, UnknownImage, attach_images, pre_upload
from tests.helpers import object_keys
from tests.photo_server import jpeg
from tests.support.images import SIZES, image_rows


def test_pre_upload_of_the_same_bytes_twice_gives_one_images_files(conn, s3, settings):
    body = jpeg(21, (1600, 1200))
    first = pre_upload(conn, s3, settings, body)
    second = pre_upload(conn, s3, settings, body)
    assert first == second
    assert image_rows(conn) == [(first, None, 0)]  # the unbound row is reused
    assert object_keys(s3, settings.bucket) == set(image_keys(first, SIZES))


def test_pre_upload_of_bytes_that_are_not_an_image_is_refused_and_stores_nothing(conn, s3, settings):
    with pytest.raises(ImageRejected, match="not a JPEG"):
        pre_upload(conn, s3, settings, b"GIF? no: plain text pretending to be a photo")
    assert image_rows(conn) == [] and object_keys(s3, settings.bucket) == set()


def test_pre_upload_of_an_oversize_file_or_a_bomb_is_refused_and_stores_nothing(conn, s3, bucket):
    from tests.photo_server import png_bomb

    small_limit = ImageSettings(bucket=bucket, sizes=SIZES, max_upload_bytes=10_000)
    with pytest.raises(ImageRejected, match="over the upload limit"):
        pre_upload(conn, s3, small_limit, jpeg(22, (1600, 1200)) + b"\0" * 10_000)
    with pytest.raises(ImageRejected) as bomb:
        pre_upload(conn, s3, ImageSettings(bucket=bucket, sizes=SIZES), png_bomb())
    assert bomb.value.kind == "bomb"
    assert image_rows(conn) == [] and object_keys(s3, bucket) == set()
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0


def test_attach_binds_in_order_adds_rows_for_images_bound_elsewhere_and_unbinds_the_rest(conn, s3, settings, offers):
    a, b, c = (pre_upload(conn, s3, settings, jpeg(30 + i)) for i in range(3))
    attach_images(conn, 1, [a, b])
    attach_images(conn, 2, [b, c])  # b is bound to offer 1: offer 2 gets a row of its own
    attach_images(conn, 1, [b])  # a is dropped from offer 1: unbound, its grace starts
    rows = conn.execute("SELECT image_id, offer_id, num FROM app.image ORDER BY offer_id NULLS FIRST, num").fetchall()
    assert rows == [(a, None, 1), (b, 1, 1), (b, 2, 1), (c, 2, 2)]
    with pytest.raises(UnknownImage):
        attach_images(conn, 3, [c, "0" * 32])
    assert conn.execute("SELECT count(*) FROM app.image WHERE offer_id = 3").fetchone()[0] == 0
