"""The Airflow Variables blobgc reads (README, "Pointing blobgc at your own database and bucket"), checked.

Read inside tasks, never at DAG-parse time. A value that does not parse raises ConfigurationError,
which fails the task without retries, naming the Variable and what it expects.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blobgc.core.rate import RateLimits
    from blobgc.core.timeouts import Timeouts

from blobgc.core.settings import (
    DEFAULT_IMAGE_SIZES,
    ConfigurationError,
    MediaSettings,
    check_extra_references,
    check_image_sizes,
    check_networks,
)


def variable(key: str, default: Any, *, json_value: bool = False) -> Any:
    from airflow.sdk import Variable

    raw = Variable.get(key, default=None)
    if raw is None:
        return default
    if json_value and isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError as error:
            raise ConfigurationError(f"Variable {key} is not valid JSON: {error}") from error
    return raw


# What may name a bucket: S3's rule, widened to the legacy names (capitals, underscores, up to 255) that old buckets
# and S3-compatible stores still have. Quotes, spaces, slashes or an empty value are certainly no bucket name.
BUCKET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")


def blob_bucket() -> str:
    """Variable blobgc_bucket: the bucket of seeds 000-003 (default `blobgc`)."""
    bucket = variable("blobgc_bucket", "blobgc")
    if not isinstance(bucket, str) or not BUCKET_NAME.fullmatch(bucket):
        raise ConfigurationError(
            f"Variable blobgc_bucket is {bucket!r}, not a bucket name: letters, digits, dots, "
            "hyphens and underscores, without quotes (e.g. blobgc)"
        )
    return bucket


def blob_bucket_origin() -> str:
    """How a refusal names Variable blobgc_bucket as what points at a bucket (saying when its default is used)."""
    from airflow.sdk import Variable

    return (
        "Variable blobgc_bucket"
        if Variable.get("blobgc_bucket", default=None) is not None
        else "Variable blobgc_bucket, unset: its default"
    )


def inventory_destinations() -> dict[str, str]:
    """Variable blobgc_inventory: source bucket -> `s3://<bucket>/<prefix>` of its S3 Inventory reports (reconcile's
    source=inventory); default none."""
    from blobgc.core.inventory_reports import destinations

    return destinations(variable("blobgc_inventory", {}, json_value=True))


def scratch_location() -> str | None:
    """Variable blobgc_scratch: where a reconcile from an inventory keeps its part files while it runs
    (`s3://bucket/prefix`, `gs://` or `az://`); default: the report's destination bucket (blobgc.core.scratch)."""
    from blobgc.core.scratch import VARIABLE, Location

    value = variable(VARIABLE, None)
    return str(Location.parse(value)) if value else None


def paste_redis_prefix() -> str:
    """Variable blobgc_paste_redis_prefix: the prefix of seed 002's cache keys in Redis (default empty)."""
    return variable("blobgc_paste_redis_prefix", "")


def image_sizes() -> dict[str, int]:
    """Variable blobgc_image_sizes: seed 001's size names and longest edges."""
    return check_image_sizes(variable("blobgc_image_sizes", DEFAULT_IMAGE_SIZES, json_value=True))


def image_watermark() -> tuple[str, int] | None:
    """Variable blobgc_image_watermark, `{"text": "...", "min_edge": 640}` or empty: (text, min edge) or None."""
    mark = variable("blobgc_image_watermark", None, json_value=True)
    if not mark:
        return None
    text = mark.get("text") if isinstance(mark, dict) else None
    edge = mark.get("min_edge", 640) if isinstance(mark, dict) else None
    if not isinstance(text, str) or not isinstance(edge, int) or isinstance(edge, bool) or edge < 0:
        raise ConfigurationError(
            f'Variable blobgc_image_watermark must be empty or {{"text": str, "min_edge": int}}, got {mark!r}'
        )
    return text, edge


def crawler_allowed_networks() -> list[str]:
    """Variable blobgc_crawler_allowed_networks: CIDRs the crawler may fetch from although they are loopback,
    link-local, private or multicast (default `[]`; the local stack sets `["127.0.0.0/8"]`)."""
    return check_networks(variable("blobgc_crawler_allowed_networks", [], json_value=True))


def media_settings() -> MediaSettings:
    """Seed 004's store: Variables blobgc_media_bucket_prefix and blobgc_media_settings."""
    settings = MediaSettings.parse(
        variable("blobgc_media_bucket_prefix", "fakebook-"), variable("blobgc_media_settings", {}, json_value=True)
    )
    for bucket in (settings.images_bucket, settings.profiles_bucket):
        if not isinstance(settings.bucket_prefix, str) or not BUCKET_NAME.fullmatch(bucket):
            raise ConfigurationError(
                f"Variable blobgc_media_bucket_prefix is {settings.bucket_prefix!r}, which makes "
                f"{bucket!r}, not a bucket name: letters, digits, dots, hyphens "
                "and underscores, without quotes (e.g. fakebook-)"
            )
    return settings


def extra_blob_references() -> list[str]:
    """Variable blobgc_extra_blob_references: SELECTs of blob ids that reference blobs without a foreign key."""
    return check_extra_references(variable("blobgc_extra_blob_references", [], json_value=True))


def rate_limits() -> RateLimits:
    """Variable blobgc_rate_limits: bucket (or bucket/prefix) -> per-object calls a second across all workers, with
    "default" for the other buckets (`blobgc.core.rate`); unset: no cap."""
    from blobgc.core.rate import VARIABLE, RateLimits

    return RateLimits.parse(variable(VARIABLE, None, json_value=True))


def db_timeouts() -> Timeouts:
    """Variable blobgc_db_timeouts: statement_timeout and lock_timeout of every blobgc connection to the database
    (`blobgc.core.timeouts`); defaults 30min and 1min."""
    from blobgc.core.timeouts import VARIABLE, Timeouts

    return Timeouts.parse(variable(VARIABLE, None, json_value=True))
