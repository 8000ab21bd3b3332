"""What blobgc is configured with, checked, and the error a bad configuration raises.

A bad setting (a Variable that does not parse, a Param below its floor, a reference blobgc cannot
follow) is not something a retry can fix: the Airflow layer turns ConfigurationError into a task
failure without retries, with the message, before anything is deleted. The values here are plain
data; reading them from Airflow Variables is the Airflow layer's job (`blobgc.dag_kit.variables`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

MIB = 1024 * 1024
MEDIA_PRESIGN_SECONDS = 300  # seed 004: a presigned POST into staging lives 5 minutes
DEFAULT_IMAGE_SIZES = {"orig": 0, "big": 1280, "medium": 640, "thumb": 160}  # docs/reference.md §3, seed 001
IMAGE_SIZE_NAME = re.compile(r"[a-z0-9_]+")


class ConfigurationError(ValueError):
    """A setting that cannot be used as it is; the message names it and says what is expected."""


def check_image_sizes(sizes: object) -> dict[str, int]:
    """Seed 001's sizes (Variable blobgc_image_sizes): names of `[a-z0-9_]+` (they become file names) to longest
    edges in pixels, 0 for unscaled."""
    example = '{"orig": 0, "big": 1280, "medium": 640, "thumb": 160}'
    if not isinstance(sizes, dict) or not sizes:
        raise ConfigurationError(
            "Variable blobgc_image_sizes must be a non-empty JSON object of size name -> "
            f"longest edge in pixels (0 = unscaled), e.g. {example}"
        )
    for name, edge in sizes.items():
        if not isinstance(name, str) or not IMAGE_SIZE_NAME.fullmatch(name):
            raise ConfigurationError(
                f"Variable blobgc_image_sizes: size name {name!r} is not allowed: a name becomes "
                "part of the file name images/{id[:2]}/{id}/{name}.jpg and must match [a-z0-9_]+ "
                f"(lower-case ASCII letters, digits, underscore), e.g. {example}"
            )
        if not isinstance(edge, int) or isinstance(edge, bool) or edge < 0:
            raise ConfigurationError(
                f"Variable blobgc_image_sizes: size {name!r} has longest edge {edge!r}; it must "
                "be a whole number of pixels >= 0 (0 = unscaled)"
            )
    return dict(sizes)


def check_networks(value: object) -> list[str]:
    """Variable blobgc_crawler_allowed_networks: a JSON list of CIDRs."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(
            'Variable blobgc_crawler_allowed_networks must be a JSON list of CIDRs, e.g. ["10.1.2.0/24"]'
        )
    for cidr in value:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError as error:
            raise ConfigurationError(
                f"Variable blobgc_crawler_allowed_networks: {cidr!r} is not a CIDR: {error}"
            ) from error
    return list(value)


def check_extra_references(value: object) -> list[str]:
    """Variable blobgc_extra_blob_references: a JSON list of SELECT statements returning blob ids."""
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ConfigurationError("Variable blobgc_extra_blob_references must be a JSON list of SQL SELECT strings")
    return list(value)


@dataclass(frozen=True)
class MediaSettings:
    """Seed 004's buckets, limits and thumbnail sizes (Variables blobgc_media_bucket_prefix, blobgc_media_settings)."""

    bucket_prefix: str = "fakebook-"
    file_limit_bytes: int = 10 * MIB  # the seed's single-file limit
    monthly_limit_bytes: int = 200 * MIB
    image_thumbs: tuple[tuple[int, int], ...] = ((640, 640), (240, 240))
    icon_thumbs: tuple[tuple[int, int], ...] = ((256, 256), (64, 64))
    slots: tuple[str, ...] = ("avatar",)

    @property
    def images_bucket(self) -> str:
        return f"{self.bucket_prefix}images"

    @property
    def profiles_bucket(self) -> str:
        return f"{self.bucket_prefix}profiles"

    def thumb_sizes(self, kind: str) -> tuple[tuple[int, int], ...]:
        return self.image_thumbs if kind == "image" else self.icon_thumbs

    @classmethod
    def parse(cls, bucket_prefix: str, extra: object) -> MediaSettings:
        """From Variable blobgc_media_settings (JSON, optional): {"file_limit_mb": 10, "monthly_limit_mb": 200,
        "image_thumbs": [[640, 640], [240, 240]], "icon_thumbs": [[256, 256], [64, 64]]}."""
        extra = extra or {}
        defaults = cls()
        try:
            if not isinstance(extra, dict) or set(extra) - {
                "file_limit_mb",
                "monthly_limit_mb",
                "image_thumbs",
                "icon_thumbs",
            }:
                raise ValueError("unknown keys")
            sizes = {
                k: tuple((int(w), int(h)) for w, h in extra[k]) for k in ("image_thumbs", "icon_thumbs") if k in extra
            }
            if any(not v or min(min(s) for s in v) < 1 for v in sizes.values()):
                raise ValueError("thumbnail sizes must be positive")
            return cls(
                bucket_prefix=bucket_prefix,
                file_limit_bytes=int(extra.get("file_limit_mb", defaults.file_limit_bytes / MIB) * MIB),
                monthly_limit_bytes=int(extra.get("monthly_limit_mb", defaults.monthly_limit_bytes / MIB) * MIB),
                image_thumbs=sizes.get("image_thumbs", defaults.image_thumbs),
                icon_thumbs=sizes.get("icon_thumbs", defaults.icon_thumbs),
            )
        except (TypeError, ValueError) as error:
            raise ConfigurationError(
                'Variable blobgc_media_settings must be JSON like {"file_limit_mb": 10, '
                '"monthly_limit_mb": 200, "image_thumbs": [[640, 640], [240, 240]], '
                f'"icon_thumbs": [[256, 256], [64, 64]]}}: {error}'
            ) from error
