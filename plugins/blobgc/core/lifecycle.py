"""What a bucket does with what blobgc deletes: its versioning, and the lifecycle rules that free noncurrent versions.

A delete on a versioned bucket only adds a delete marker: every byte is still stored (and billed) as a noncurrent
version until a lifecycle rule's `NoncurrentVersionExpiration` expires it. So blobgc reads, at each run, the
versioning and lifecycle configuration of every bucket it deletes from (`bucket_state`), counts what it deletes
there as *deleted* (noncurrent), never as *reclaimed*, and says when the noncurrent bytes will be freed, or, where no
rule expires them, that they never will be (`KEEPS_EVERY_VERSION`, with the rule to add: `suggested_rule`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psycopg
from botocore.exceptions import ClientError

from blobgc.core import queries
from blobgc.core.objects import KEEPS_VERSIONS, ObjectStore, error_code, versioning_status
from blobgc.core.runs import RunRef

log = logging.getLogger(__name__)

KEEPS_EVERY_VERSION = (
    "this bucket keeps every deleted version; nothing is reclaimed until a lifecycle rule expires noncurrent versions"
)
NO_LIFECYCLE = ("NoSuchLifecycleConfiguration", "NoSuchLifecycle")


@dataclass(frozen=True)
class Rule:
    """An enabled lifecycle rule, as far as freeing deleted objects goes."""

    prefix: str
    noncurrent_days: int | None
    expired_markers: bool


@dataclass(frozen=True)
class BucketState:
    """A bucket's versioning status ("Enabled", "Suspended" or "") and its enabled lifecycle rules."""

    versioning: str = ""
    rules: tuple[Rule, ...] = field(default_factory=tuple)

    @property
    def keeps_versions(self) -> bool:
        """Whether a delete here leaves the object's bytes stored as a noncurrent version."""
        return self.versioning in KEEPS_VERSIONS

    def noncurrent_days(self, key: str) -> int | None:
        """The days after which a noncurrent version of `key` expires (the shortest rule covering it), or None."""
        days = [r.noncurrent_days for r in self.rules if r.noncurrent_days is not None and key.startswith(r.prefix)]
        return min(days) if days else None

    def expires_markers(self) -> bool:
        """Whether a rule removes expired-object delete markers (markers over no version left)."""
        return any(r.expired_markers for r in self.rules)


def bucket_state(s3: ObjectStore, bucket: str) -> BucketState:
    """Read `bucket`'s versioning and (on a versioned bucket) its lifecycle rules; errors on the versioning call
    propagate, a lifecycle configuration blobgc may not read is taken as no rule (and logged)."""
    state = BucketState(versioning_status(s3, bucket))
    if not state.keeps_versions:
        return state
    try:
        config = s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    except ClientError as error:
        if error_code(error) not in NO_LIFECYCLE:
            log.warning(
                "may not read the lifecycle configuration of %s (%s): taken as no rule", bucket, error_code(error)
            )
        return state
    rules = []
    for rule in config.get("Rules", []):
        if rule.get("Status") != "Enabled":
            continue
        where = rule.get("Filter") or {}
        prefix = where.get("Prefix", (where.get("And") or {}).get("Prefix", rule.get("Prefix", ""))) or ""
        conditions = {**where, **(where.get("And") or {})}
        if conditions.get("Tag") or conditions.get("Tags"):
            continue  # a rule by tag never applies to what blobgc deletes (it tags nothing)
        if "ObjectSizeGreaterThan" in conditions or "ObjectSizeLessThan" in conditions:
            continue  # a rule by size may not cover a given object: never taken to free its bytes
        noncurrent = (rule.get("NoncurrentVersionExpiration") or {}).get("NoncurrentDays")
        markers = bool((rule.get("Expiration") or {}).get("ExpiredObjectDeleteMarker"))
        rules.append(Rule(prefix, int(noncurrent) if noncurrent is not None else None, markers))
    return BucketState(state.versioning, tuple(rules))


def suggested_rule(bucket: str, days: int = 7) -> str:
    """The lifecycle rule that frees what blobgc deletes in `bucket`, as an `aws s3api` command."""
    return (
        f"aws s3api put-bucket-lifecycle-configuration --bucket {bucket} --lifecycle-configuration "
        f'\'{{"Rules": [{{"ID": "expire-noncurrent", "Status": "Enabled", "Filter": {{}}, '
        f'"NoncurrentVersionExpiration": {{"NoncurrentDays": {days}}}, '
        f'"Expiration": {{"ExpiredObjectDeleteMarker": true}}}}]}}\''
    )


def version_flags(bucket: str, keeps_every_version: bool) -> dict[str, object]:
    """What the receipt and the reclaim page say of a bucket: whether it keeps every deleted version (a versioned
    bucket with no rule expiring noncurrent versions), and then the warning and the rule to add."""
    return {
        "keeps_every_version": keeps_every_version,
        "warning": KEEPS_EVERY_VERSION if keeps_every_version else None,
        "suggested_rule": suggested_rule(bucket) if keeps_every_version else None,
    }


def record_bucket(
    conn: psycopg.Connection,
    run: RunRef,
    bucket: str,
    state: BucketState,
    *,
    keys: list[str],
    bytes_noncurrent: int,
    delete_markers: int = 0,
) -> None:
    """Record, in the settling transaction, what a real run found of a bucket it deleted `keys` from, and the bytes
    its deletions left as noncurrent versions, with the delete markers they left (each an expired-object delete marker
    once its versions expire: a cleanup item only a rule with ExpiredObjectDeleteMarker removes). The rule is the one
    covering every key (the longest of theirs), or none when some key has none."""
    if run.dry_run:
        return
    days = [state.noncurrent_days(k) for k in keys] if state.keeps_versions else []
    noncurrent_days = None if not days or any(d is None for d in days) else max(d for d in days if d is not None)
    conn.execute(
        queries.load("lifecycle/upsert_run_bucket"),
        {
            "dag_id": run.dag_id,
            "run_id": run.run_id,
            "bucket": bucket,
            "versioning": state.versioning or "Unversioned",
            "noncurrent_days": noncurrent_days,
            "expired_markers": state.expires_markers(),
            "bytes_noncurrent": bytes_noncurrent if state.keeps_versions else 0,
            "delete_markers": delete_markers if state.keeps_versions else 0,
        },
    )
