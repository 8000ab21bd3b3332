"""The checks a listing's page and an inventory's batch share, and how their findings are recorded.

A key is judged by what accounts for it, its owner: a seed layout (`KeySource`: the key's reading names its
row, one query asks which of a batch's rows exist) or a collection (`BoundCollection`: one query asks which
keys some row forms, exactly). A key its owner accounts for is left alone; one of no shape the owner knows
is reported, never deleted; any other is an orphan once older than the cut-off (`check_age_floor`), else
too young to judge. A page's or batch's findings are recorded in one transaction with its checkpoint:
orphans confirmed over several runs (`blobgc.collectors.reconcile.sightings`) planned (owed after the gate, checked
again by the drain under the layout's guard), the others counted as waiting, unknown keys and missing objects
reported, the checkpoint moved past it so that a retry resumes there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import psycopg

from blobgc.core import queries
from blobgc.core.collections import BoundCollection, accounted_keys
from blobgc.core.keys import KeySource
from blobgc.core.plans import plan_objects
from blobgc.core.runs import RunRef
from blobgc.core.settings import ConfigurationError

PAGE = 1000  # keys per listing page, per batch checked, per plan item and per deletion-log row
# The least age at which an unaccounted-for object may be judged an orphan: an upload whose row is not written
# yet, or a multipart upload (dated by its initiation), must never be one.
MIN_AGE_FLOOR_HOURS = 1
# An inventory part's two phases (blobgc.reconcile_checkpoint.inventory_phase; NULL for a listed shard): the
# report's keys no row forms, then the keys rows must have that the report lacks.
LEFTOVERS, LACKING = "leftovers", "lacking"
WAITING_SAMPLE = 5  # keys of the orphans waiting for confirmation kept per shard for the report, and logged

Owner = KeySource | BoundCollection  # what accounts for a key


def check_age_floor(run: RunRef, cutoff: datetime) -> None:
    """Refuse a cut-off less than MIN_AGE_FLOOR_HOURS before the run's reference time (a min_age_hours below 1)."""
    if run.reference_time is not None and run.reference_time - cutoff < timedelta(hours=MIN_AGE_FLOOR_HOURS):
        raise ConfigurationError(
            f"min_age_hours must be at least {MIN_AGE_FLOOR_HOURS}: a younger object may be an upload "
            f"whose row is not written yet (got a cut-off of {cutoff.isoformat()}, less than "
            f"{MIN_AGE_FLOOR_HOURS} h before the run's reference time {run.reference_time.isoformat()})"
        )


def judged_age(run: RunRef, cutoff: datetime) -> timedelta:
    """The age at which an object is judged: from the cut-off to the run's reference time (or now)."""
    return (run.reference_time or datetime.now(UTC)) - cutoff


def owner_source(owner: Owner) -> str:
    """The deletion-log source of the keys `owner` accounts for."""
    return owner.collection.source if isinstance(owner, BoundCollection) else owner.name


@dataclass
class Findings:
    """What a listing's page or an inventory's batch holds, recorded in one transaction."""

    considered: int = 0  # keys judged (in the run's scope)
    accounted: int = 0  # of them, keys a row accounts for
    # (key, size, LastModified): no row, older than the cut-off; once confirmed (`sightings.confirm_orphans`), those
    # found orphaned on `confirmations` real runs in a row, planned
    orphans: list[tuple[str, int, datetime]] = field(default_factory=list)
    waiting: list[tuple[str, int]] = field(default_factory=list)  # (key, size): orphans waiting for confirmation
    young: int = 0  # keys no row accounts for, too young to judge
    first_young: datetime | None = None  # the oldest LastModified among them: when the first becomes eligible
    unknown: list[tuple[str, str | None]] = field(default_factory=list)  # (key, its collection's source or None)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (key a row must have, its source): not there

    @property
    def orphan_bytes(self) -> int:
        return sum(size for _, size, _ in self.orphans)

    def judge(self, key: str, size: int, modified: datetime, cutoff: datetime, *, accounted: bool) -> None:
        """Count a key of a known shape: accounted for, an orphan (older than `cutoff`), or too young to judge."""
        if accounted:
            self.accounted += 1
        elif modified < cutoff:
            self.orphans.append((key, size, modified))
        else:
            self.young += 1
            if self.first_young is None or modified < self.first_young:
                self.first_young = modified


def accounted_for(conn: psycopg.Connection, owner: Owner, keys: Iterable[str]) -> tuple[set[str], set[str]]:
    """(the keys a row of `owner` accounts for, the keys of no shape it knows), asked in one query per layout or
    template (`blobgc.core.collections.accounted_keys` for a collection)."""
    if isinstance(owner, BoundCollection):
        return accounted_keys(conn, owner, keys)
    keys = list(keys)
    refs = {key: ref for key in keys if (ref := owner.layout.identity(key)) is not None}
    wanted = sorted(set(refs.values()))
    existing = {r[0] for r in conn.execute(queries.load(owner.existing_query), {"refs": wanted})} if wanted else set()
    return {key for key, ref in refs.items() if ref in existing}, {key for key in keys if key not in refs}


def judge_keys(
    conn: psycopg.Connection,
    owner: Owner,
    items: list[tuple[str, int, datetime]],
    cutoff: datetime,
    found: Findings,
    primary: psycopg.Connection | None = None,
) -> None:
    """Judge (key, size, LastModified) items of one owner into `found`: one look-up for them all (`accounted_for`);
    a key of no shape the owner knows is reported under the collection's source (a seed layout's under none).

    With `primary` (when `conn` is a read replica, `blobgc.core.replica`), the keys the replica accounts for no row
    of are looked up again on the primary: a row the replica has not replayed yet keeps its object."""
    accounted, unshaped = accounted_for(conn, owner, (key for key, _, _ in items))
    if primary is not None and primary is not conn:
        rest = [key for key, _, _ in items if key not in accounted and key not in unshaped]
        if rest:
            accounted |= accounted_for(primary, owner, rest)[0]
    unknown_source = owner.collection.source if isinstance(owner, BoundCollection) else None
    for key, size, modified in items:
        if key in unshaped:
            found.unknown.append((key, unknown_source))
        else:
            found.judge(key, size, modified, cutoff, accounted=key in accounted)


def plan_orphans(
    conn: psycopg.Connection,
    run: RunRef,
    owner: Owner,
    orphans: list[tuple[str, int, datetime]],
    *,
    part: str,
    bucket: str,
    cutoff: datetime,
    counts_part: str | None = None,
) -> None:
    """Plan one owner's confirmed orphans in `part` (owed after the gate, `blobgc.core.plans.owe_planned_objects`),
    in items of PAGE keys that carry the cut-off: the drain asks the store about each just before deleting it and keeps
    one written since. On a dry run the items are its report (`add_plan_item` logs and counts them under
    `counts_part`)."""
    collection = owner.name if isinstance(owner, BoundCollection) else None
    source = owner_source(owner)
    keys, sizes = [k for k, _, _ in orphans], [s for _, s, _ in orphans]
    plan_objects(
        conn,
        run,
        part=part,
        source=source,
        bucket=bucket,
        keys=keys,
        sizes=sizes,
        modified_before=cutoff,
        batch_size=PAGE,
        collection=collection,
        counts_part=counts_part,
        count=True,
    )


def report_findings(conn: psycopg.Connection, run: RunRef, bucket: str, found: Findings) -> None:
    """Record the keys of no known layout and the rows' missing objects (reported, never deleted nor "fixed")."""
    for kind, keys_found in (("unknown_key", found.unknown), ("missing_object", found.missing)):
        for source in dict.fromkeys(s for _, s in keys_found):
            conn.execute(
                queries.load("reconcile/insert_findings"),
                {
                    "run_id": run.run_id,
                    "kind": kind,
                    "bucket": bucket,
                    "source": source,
                    "keys": [k for k, s in keys_found if s == source],
                },
            )


class Checkpoint(NamedTuple):
    """Where a shard (or an inventory part) of a run got to."""

    start_after: str  # the last key done
    inventory_phase: str | None  # an inventory part's phase (LEFTOVERS, LACKING); None for a listed shard
    done: bool


def read_checkpoint(conn: psycopg.Connection, run: RunRef, shard: str) -> Checkpoint | None:
    """The checkpoint of `shard` (its name in blobgc.reconcile_checkpoint) in `run`, or None: start from the start."""
    row = conn.execute(queries.load("reconcile/select_checkpoint"), {"run_id": run.run_id, "shard": shard}).fetchone()
    return Checkpoint(*row) if row else None


def advance_checkpoint(
    conn: psycopg.Connection,
    run: RunRef,
    shard: str,
    *,
    start_after: str,
    found: Findings,
    keys: int = 0,
    done: bool = False,
    scope: str | None = None,
    age_floor: timedelta = timedelta(0),
    inventory_phase: str | None = None,
) -> None:
    """Move a shard's checkpoint past a page or batch and add its counts (in its transaction); `keys` are the keys
    checked, and the report counts under `scope`, a collection or bucket (`blobgc.collectors.reconcile.report`)."""
    conn.execute(
        queries.load("reconcile/upsert_checkpoint"),
        {
            "run_id": run.run_id,
            "shard": shard,
            "start_after": start_after,
            "inventory_phase": inventory_phase,
            "keys": keys,
            "orphans": len(found.orphans),
            "orphan_bytes": found.orphan_bytes,
            "young": found.young,
            "unknown": len(found.unknown),
            "missing": len(found.missing),
            "done": done,
            "scope": scope,
            "considered": found.considered,
            "accounted": found.accounted,
            "first_eligible_at": found.first_young + age_floor if found.first_young else None,
            "waiting": len(found.waiting),
            "waiting_sample": [key for key, _ in found.waiting[:WAITING_SAMPLE]],
        },
    )
