"""Seed 004's key layouts: a user's masters and thumbnails, and the staging uploads of the S3-only media store.

The store has no table: a thumbnail is accounted for by its master (`keep_thumbnails_with_a_master`), a
staging upload by nothing once it is older than the staging grace.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from blobgc.core.keys import KeyLayout, KeyLayoutError, Verdict
from blobgc.core.objects import ObjectStore, first_key

USER = r"[0-9A-Za-z_-]{1,64}"
SLOT = r"[a-z][a-z0-9_]{0,31}"
MEDIA_EXT = r"jpg|jpeg|png|webp|heic"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
USER_ID = re.compile(USER)
SLOT_NAME = re.compile(SLOT)
MASTER = re.compile(rf"(?P<user>{USER})/masters/(?P<rev>\d{{6}})/(?P<stem>[0-9a-f]{{16}})\.(?P<ext>{MEDIA_EXT})")
THUMB = re.compile(
    rf"(?P<user>{USER})/thumbs/(?P<rev>\d{{6}})/(?P<stem>[0-9a-f]{{16}})_(?P<w>\d{{1,5}})"
    r"x(?P<h>\d{1,5})\.webp"
)
PROFILE_MASTER = re.compile(rf"(?P<user>{USER})/masters/(?P<slot>{SLOT})\.(?P<ext>{MEDIA_EXT})")
PROFILE_THUMB = re.compile(rf"(?P<user>{USER})/thumbs/(?P<slot>{SLOT})_(?P<w>\d{{1,5}})x(?P<h>\d{{1,5}})\.webp")
STAGING = re.compile(rf"staging/(?P<user>{USER})/(?P<uuid>{UUID})\.(?P<ext>{MEDIA_EXT})")
PROFILE_STAGING = re.compile(
    rf"profiles-staging/(?P<user>{USER})/(?P<slot>{SLOT})/(?P<uuid>{UUID})"
    rf"\.(?P<ext>{MEDIA_EXT})"
)
STAGING_PREFIXES = {"images": "staging/", "profiles": "profiles-staging/"}  # bucket kind -> its staging prefix
STAGING_LAYOUTS = {"staging/": STAGING, "profiles-staging/": PROFILE_STAGING}  # staging prefix -> its only layout
# A user with one of these ids would keep masters under a staging prefix, where staging is cleaned.
RESERVED_USER_IDS = frozenset(prefix.rstrip("/") for prefix in STAGING_PREFIXES.values())


def any_of(*patterns: re.Pattern[str]) -> re.Pattern[str]:
    """One pattern matching a whole key of any of `patterns`, itself as group "id" (the object is its own identity)."""
    unnamed = "|".join(re.sub(r"\(\?P<\w+>", "(?:", p.pattern) for p in patterns)
    return re.compile(rf"(?P<id>{unnamed})")


# Both stores' keys start with a user id: the layouts' prefix is empty, a shard is a user id's first character.
@contextmanager
def keep_thumbnails_with_a_master(
    _layout: KeyLayout, _conn, s3: ObjectStore, bucket: str, keys: list[str]
) -> Iterator[Verdict]:
    """Seed 004's guard: keep an orphan thumbnail whose master exists again (a profile slot uploaded anew
    since the check), by one listing per master prefix, just before the deletion."""
    by_master: dict[str, list[str]] = {}
    for key in keys:
        prefix = master_prefix_of_thumb(key)
        if prefix is not None:
            by_master.setdefault(prefix, []).append(key)
    yield Verdict({k for prefix, ks in by_master.items() if first_key(s3, bucket, prefix, "") is not None for k in ks})


MEDIA_THUMBNAILS = KeyLayout("media.thumbnails", "", 1, any_of(THUMB, PROFILE_THUMB), keep_thumbnails_with_a_master)
MEDIA_STAGING = KeyLayout("media.staging", "", 1, any_of(STAGING, PROFILE_STAGING))


def rev_month(yyyymm: int) -> str:
    """`revYYYYMM`: 999999 - YYYYMM, six digits, so later months sort first."""
    if not 100001 <= yyyymm <= 999912 or not 1 <= yyyymm % 100 <= 12:
        raise KeyLayoutError(f"not a YYYYMM month: {yyyymm}")
    return f"{999999 - yyyymm:06d}"


def month_of(when: datetime) -> int:
    when = when.astimezone(UTC)
    return when.year * 100 + when.month


def time8(when: datetime) -> str:
    """0xffffffff minus the milliseconds since the start of `when`'s month (UTC), as 8 hex digits."""
    when = when.astimezone(UTC)
    start = when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    millis = int((when - start).total_seconds() * 1000)
    return f"{0xFFFFFFFF - millis:08x}"


def master_key(user: str, when: datetime, ext: str, hash8: str | None = None) -> str:
    """`{user}/masters/{revYYYYMM}/{time8}{hash8}.{ext}`: a user's listing of masters is newest first."""
    return f"{user}/masters/{rev_month(month_of(when))}/{time8(when)}{hash8 or secrets.token_hex(4)}.{ext}"


def thumb_key(master: str, width: int, height: int) -> str:
    """The thumbnail of a master (image or profile) at one size."""
    return f"{thumb_prefix(master)}{width}x{height}.webp"


def thumb_prefix(master: str) -> str:
    """The prefix of every thumbnail size of a master."""
    if m := MASTER.fullmatch(master):
        return f"{m['user']}/thumbs/{m['rev']}/{m['stem']}_"
    if p := PROFILE_MASTER.fullmatch(master):
        return f"{p['user']}/thumbs/{p['slot']}_"
    raise KeyLayoutError(f"not a master key: {master!r}")


def master_prefix_of_thumb(key: str) -> str | None:
    """The prefix of the master a thumbnail belongs to (any extension), or None for another key."""
    if t := THUMB.fullmatch(key):
        return f"{t['user']}/masters/{t['rev']}/{t['stem']}."
    if p := PROFILE_THUMB.fullmatch(key):
        return f"{p['user']}/masters/{p['slot']}."
    return None


def staging_layout(prefix: str) -> re.Pattern[str]:
    """The one key layout allowed under a staging prefix (or a shard of it, such as `staging/0`)."""
    for staging_prefix, layout in STAGING_LAYOUTS.items():
        if prefix.startswith(staging_prefix):
            return layout
    raise KeyLayoutError(f"{prefix!r} is not under a staging prefix ({', '.join(STAGING_LAYOUTS)})")
