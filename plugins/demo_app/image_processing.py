"""Seed 001's crop-resize-split, in memory: one decode per image, every configured size from it.

Untrusted bytes are sniffed by their magic numbers (never by extension or Content-Type), opened
with Pillow limited to the formats accepted, and refused above a pixel budget before decoding,
so a decompression bomb costs a header read. A JPEG is decoded once, at the smallest DCT scale
(1/2, 1/4, 1/8, via `draft()`) that still covers the largest size needed; each smaller size is
resized from the previous one. EXIF orientation is applied. When the original can be kept as it
is (no rotation, no watermark), its bytes are stored unchanged as the `0` (unscaled) size.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageOps

from blobgc.core.uploads import Rejected

ACCEPTED_FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
DEFAULT_SIZES = {"orig": 0, "big": 1280, "medium": 640, "thumb": 160}
DEFAULT_MAX_PIXELS = 50_000_000
MAX_ASPECT = 4.0  # wider (or taller) than 4:1 is center-cropped: listing pages cannot show it anyway
EXT = "jpg"  # every size is stored as JPEG: `images/{id[:2]}/{id}/{size}.jpg`
JPEG_QUALITY = 88
EXIF_ORIENTATION = 0x0112


class ImageRejected(Rejected, ValueError):
    """Bytes that are not an acceptable image; `kind` says why (not_an_image, bomb, unsupported, corrupt)."""


@dataclass(frozen=True)
class Watermark:
    """Text drawn in the lower right corner of every size whose longest edge is at least `min_edge`."""

    text: str
    min_edge: int = 640
    opacity: int = 96


def sniff_format(data: bytes) -> str | None:
    """The image format from the first bytes, or None."""
    if data[:3] == b"\xff\xd8\xff":
        return "JPEG"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    return None


def open_untrusted(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Open `data` as an accepted image, refusing anything else before it is decoded."""
    fmt = sniff_format(data)
    if fmt is None:
        raise ImageRejected("not_an_image", "the bytes are not a JPEG, PNG, WEBP or GIF image")
    return open_as(data, fmt, fmt, max_pixels=max_pixels)


def open_as(data: bytes, pillow_format: str, label: str, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Open untrusted bytes with the one Pillow decoder of their sniffed format, from the header only.

    A decompression bomb (Pillow's check, then the pixel budget) and unreadable bytes are clean
    rejections (ImageRejected), raised before any pixel is decoded.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=[pillow_format])
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageRejected("bomb", f"decompression bomb refused: {error}") from error
    except (OSError, SyntaxError, ValueError, RuntimeError) as error:
        raise ImageRejected("corrupt", f"unreadable {label} image: {error}") from error
    width, height = image.size
    if width * height > max_pixels:
        raise ImageRejected(
            "bomb",
            f"{width}x{height} is {width * height:,} pixels, over the limit of "
            f"{max_pixels:,}: refused as a possible decompression bomb",
        )
    if width < 1 or height < 1:
        raise ImageRejected("corrupt", "empty image")
    return image


def aspect_crop_box(width: int, height: int, max_aspect: float = MAX_ASPECT) -> tuple[int, int, int, int]:
    """The centered box of a `width` x `height` image no wider (or taller) than `max_aspect` to 1."""
    if width > height * max_aspect:
        new_width = int(height * max_aspect)
        left = (width - new_width) // 2
        return left, 0, left + new_width, height
    if height > width * max_aspect:
        new_height = int(width * max_aspect)
        top = (height - new_height) // 2
        return 0, top, width, top + new_height
    return 0, 0, width, height


def crop_to_aspect(image: Image.Image, max_aspect: float = MAX_ASPECT) -> Image.Image:
    box = aspect_crop_box(*image.size, max_aspect)
    return image if box == (0, 0, *image.size) else image.crop(box)


def fit(size: tuple[int, int], longest_edge: int) -> tuple[int, int]:
    """`size` scaled so that its longest edge is `longest_edge` (never enlarged)."""
    width, height = size
    scale = longest_edge / max(width, height)
    if scale >= 1:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))


def draw_watermark(image: Image.Image, watermark: Watermark) -> Image.Image:
    overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    margin = max(4, image.width // 100)
    box = draw.textbbox((0, 0), watermark.text)
    position = (image.width - (box[2] - box[0]) - margin, image.height - (box[3] - box[1]) - margin)
    draw.text(position, watermark.text, fill=(255, 255, 255, watermark.opacity))
    return Image.alpha_composite(image.convert("RGBA"), overlay).convert("RGB")


def encode_jpeg(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=JPEG_QUALITY, optimize=False)
    return out.getvalue()


def render_sizes(
    data: bytes,
    sizes: dict[str, int] | None = None,
    *,
    watermark: Watermark | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> dict[str, bytes]:
    """Crop-resize-split `data` into every size of `sizes` (name -> longest edge, 0 = unscaled), as JPEG bytes."""
    sizes = dict(DEFAULT_SIZES if sizes is None else sizes)
    image = open_untrusted(data, max_pixels=max_pixels)
    orientation = image.getexif().get(EXIF_ORIENTATION, 1) if image.format == "JPEG" else 1
    width, height = image.size
    cropped = max(width, height) > min(width, height) * MAX_ASPECT
    keep_original = image.format == "JPEG" and orientation == 1 and not cropped and watermark is None
    needs_full = any(edge == 0 for edge in sizes.values()) and not keep_original
    largest = max((edge for edge in sizes.values() if edge > 0), default=0)
    if image.format == "JPEG" and not needs_full and largest:
        # decode once at the smallest DCT scale that still covers the largest size (rotations swap edges)
        image.draft("RGB", (largest, largest))
    try:
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageRejected("corrupt", f"unreadable image data: {error}") from error
    image = ImageOps.exif_transpose(image)
    # the displayed full size (rotated and cropped), from the header: every size is cut from it, so a
    # size does not depend on the decode scale or on the size cut before it
    left, top, right, bottom = aspect_crop_box(*((height, width) if orientation in (5, 6, 7, 8) else (width, height)))
    full = (right - left, bottom - top)
    if image.mode not in ("RGB", "L"):
        image = image.convert("RGBA").convert("RGB") if "A" in image.mode or image.mode == "P" else image.convert("RGB")
    image = crop_to_aspect(image)
    rendered: dict[str, bytes] = {}
    current = image
    # largest first, each size resized from the previous (smaller) one: the work shrinks as it goes
    for name, edge in sorted(sizes.items(), key=lambda item: -(item[1] or 10**9)):
        if edge == 0:
            rendered[name] = (
                data
                if keep_original
                else encode_jpeg(
                    draw_watermark(image, watermark) if watermark and max(image.size) >= watermark.min_edge else image
                )
            )
            continue
        target = fit(full, edge)
        if target != current.size:
            current = current.resize(target, Image.Resampling.LANCZOS, reducing_gap=2.0)
        out = current
        if watermark and max(out.size) >= watermark.min_edge:
            out = draw_watermark(out, watermark)
        rendered[name] = encode_jpeg(out)
    return rendered


def render_sizes_naively(data: bytes, sizes: dict[str, int] | None = None) -> dict[str, bytes]:
    """The slow way, for the benchmark: a full decode and a resize from full size for every size."""
    rendered = {}
    for name, edge in (DEFAULT_SIZES if sizes is None else sizes).items():
        image = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
        image = image.convert("RGB")
        if edge:
            image = image.resize(fit(image.size, edge), Image.Resampling.LANCZOS)
        rendered[name] = encode_jpeg(image)
    return rendered
