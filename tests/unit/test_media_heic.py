"""Seed 004's HEIC masters (blobgc.media): decoded with pillow-heif behind the same guards as the other formats."""
from __future__ import annotations

import io

import pillow_heif
import pytest
from PIL import Image

from blobgc import media
from blobgc.image_processing import ImageRejected
from blobgc.media import render_thumbnails, sniff


def heic(width: int, height: int) -> bytes:
    """A real HEIC image, encoded by pillow-heif (libheif with x265)."""
    buffer = io.BytesIO()
    pillow_heif.from_pillow(Image.new("RGB", (width, height), (200, 60, 90))).save(buffer, quality=70)
    return buffer.getvalue()


def test_heic_masters_are_decoded_into_webp_thumbnails():
    data = heic(800, 400)
    assert sniff(data[:64]) == "HEIC"
    rendered = render_thumbnails(data, ((640, 640), (240, 240)))
    sizes = {box: Image.open(io.BytesIO(body)) for box, body in rendered.items()}
    assert {box: (im.format, im.size) for box, im in sizes.items()} == {
        (640, 640): ("WEBP", (640, 320)), (240, 240): ("WEBP", (240, 120))}
    assert sizes[(240, 240)].convert("RGB").getpixel((120, 60)) == pytest.approx((200, 60, 90), abs=12)


def test_heic_over_the_pixel_budget_is_refused_before_decoding():
    with pytest.raises(ImageRejected) as refused:
        media.open_master(heic(64, 64), max_pixels=64 * 64 - 1)
    assert refused.value.kind == "bomb"


def test_heic_that_is_truncated_or_only_a_header_is_a_clean_rejection():
    data = heic(64, 64)
    for broken in (data[:40], data[: len(data) // 2]):
        with pytest.raises(ImageRejected):
            media.open_master(broken)
    with pytest.raises(ImageRejected):
        render_thumbnails(data[: len(data) // 2], ((64, 64),))


def test_heic_sniffing_decides_not_the_extension():
    with pytest.raises(ImageRejected) as refused:
        media.open_master(b"GIF89a" + b"\x00" * 100)  # GIF is not a master format
    assert refused.value.kind == "not_an_image"
