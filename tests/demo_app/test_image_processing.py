"""demo_app.image_processing: crop-resize-split, untrusted images, decompression bombs."""
from __future__ import annotations

import io

import pytest
from PIL import Image

from demo_app.image_processing import ImageRejected, Watermark, open_untrusted, render_sizes, sniff_format
from tests.support.images import SIZES


def jpeg(size=(3000, 2000), orientation: int | None = None) -> bytes:
    image = Image.new("RGB", size, (200, 40, 40))
    image.paste((10, 10, 200), (0, 0, size[0] // 3, size[1] // 3))  # a marker in the top-left corner
    out = io.BytesIO()
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    image.save(out, "JPEG", quality=90, exif=exif.tobytes())
    return out.getvalue()


def dims(data: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(data)).size


def test_every_size_is_cut_to_its_longest_edge_and_the_original_is_kept_as_is():
    data = jpeg()
    out = render_sizes(data, SIZES)
    assert set(out) == set(SIZES)
    assert out["orig"] is data  # nothing to change: the uploaded bytes are stored unchanged
    assert dims(out["big"]) == (1280, 853)
    assert dims(out["medium"]) == (640, 427)
    assert dims(out["thumb"]) == (160, 107)


def test_exif_orientation_is_applied_to_every_size():
    out = render_sizes(jpeg(orientation=6), SIZES)  # 6: rotate 90 degrees clockwise to display
    assert dims(out["orig"]) == (2000, 3000)
    assert dims(out["big"]) == (853, 1280)
    thumb = Image.open(io.BytesIO(out["thumb"])).convert("RGB")
    assert thumb.getpixel((thumb.width - 5, 5))[2] > 150  # the blue marker moved to the top right


def test_small_images_are_never_enlarged():
    out = render_sizes(jpeg((300, 200)), SIZES)
    assert dims(out["big"]) == (300, 200) and dims(out["thumb"]) == (160, 107)


def test_extreme_panoramas_are_center_cropped_to_4_to_1():
    out = render_sizes(jpeg((4000, 500)), SIZES)
    assert dims(out["orig"]) == (2000, 500)


def test_a_watermark_is_drawn_on_large_sizes_only():
    plain = render_sizes(jpeg(), SIZES)
    marked = render_sizes(jpeg(), SIZES, watermark=Watermark("blobgc", min_edge=640))
    assert marked["big"] != plain["big"] and marked["orig"] is not plain["orig"]
    assert marked["thumb"] == plain["thumb"]


@pytest.mark.parametrize("data, kind", [
    (b"just some text", "not_an_image"),
    (b"\xff\xd8\xff" + b"\0" * 100, "corrupt"),
])
def test_bytes_that_are_not_an_image_are_refused(data, kind):
    with pytest.raises(ImageRejected) as refused:
        render_sizes(data, SIZES)
    assert refused.value.kind == kind


def test_a_decompression_bomb_is_refused_from_its_header():
    from tests.photo_server import png_bomb

    with pytest.raises(ImageRejected) as refused:
        open_untrusted(png_bomb())
    assert refused.value.kind == "bomb"


def test_the_type_is_sniffed_from_the_bytes_not_the_name():
    assert sniff_format(jpeg((10, 10))) == "JPEG"
    assert sniff_format(b"\x89PNG\r\n\x1a\n....") == "PNG"
    assert sniff_format(b"RIFF\0\0\0\0WEBPVP8 ") == "WEBP"
    assert sniff_format(b"<html>") is None
