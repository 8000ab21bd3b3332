"""Orphans confirmed over several runs: blobgc_reconcile's Param `confirmations` (docs/reference.md §7).

An orphan is planned only once `confirmations` consecutive real reconcile runs found it orphaned, this one included.
Each real run that reconciles a shard is a *pass* (`blobgc.reconcile_pass`, numbered in the order runs first
reconcile a shard; a dry run, or a run executing a dry run's plan, is none). Each orphan a pass finds is a
*sighting* (`blobgc.reconcile_sighting`): its object's size and LastModified (to the second), the pass that found
it, and on how many passes in a row it was found. A sighting counts on only from the pass just before:

- a key a row accounts for again, or that the previous pass did not find orphaned (not listed, too young, or out
  of a run limited by `prefixes` or `collections`: such a run only delays deletions), starts over;
- a key whose object was written again (its size or LastModified changed) starts over;
- a retried page finds its sightings already in its own pass and counts them once.

Only the sightings of a run's pass and of the pass before it are kept: each task of a real run first forgets
older ones (keys no longer listed, or no longer orphans), in batches. A dry run records nothing and is no pass:
it plans what the latest pass already confirmed, and reports the rest as waiting. Sightings only ever hold a
deletion back: every planned orphan still passed the age floor, and the drain checks it again just before deleting
it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg

from blobgc.collectors.reconcile.checks import Findings
from blobgc.core import queries
from blobgc.core.runs import RunRef
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

FORGET_BATCH = 10_000  # sightings forgotten per transaction


@dataclass(frozen=True)
class Passes:
    """The run's pass of sightings (None: a dry run records none), the pass before it (a dry run's: the latest, which
    a real run now would follow), and how many passes in a row confirm an orphan."""

    this: int | None
    previous: int | None
    confirmations: int


def start_pass(conn: psycopg.Connection, run: RunRef, confirmations: int) -> Passes:
    """Record a real run as a pass (once: its other tasks and retries find it), forget the sightings before the
    previous pass, and return the run's passes."""
    if confirmations < 1:
        raise ConfigurationError(
            f"confirmations must be at least 1 (1: an orphan is planned on first sight), got {confirmations}"
        )
    ids = {"dag_id": run.dag_id, "run_id": run.run_id}
    if not run.dry_run:
        with conn.transaction():
            conn.execute(queries.load("reconcile/insert_sighting_pass"), ids)
    this, previous = queries.one_row(conn.execute(queries.load("reconcile/select_sighting_passes"), ids))
    if this is not None and previous is not None:
        forgotten = forget_sightings(conn, previous)
        if forgotten:
            log.info("forgot %d sightings of orphans that no pass since pass %d found again", forgotten, previous)
    return Passes(this, previous, confirmations)


def forget_sightings(conn: psycopg.Connection, previous: int) -> int:
    """Delete the sightings of passes before `previous`, FORGET_BATCH at a time, and return how many."""
    forgotten = 0
    while True:
        with conn.transaction():
            deleted = conn.execute(
                queries.load("reconcile/delete_forgotten_sightings"), {"previous": previous, "limit": FORGET_BATCH}
            ).rowcount
        forgotten += deleted
        if deleted < FORGET_BATCH:
            return forgotten


def confirm_orphans(conn: psycopg.Connection, passes: Passes, bucket: str, found: Findings) -> None:
    """Keep in `found.orphans` those of `bucket` found orphaned on `confirmations` real passes in a row (a real run
    included itself); the others wait (`found.waiting`). A real run records its sightings, in the caller's transaction
    (the page's or batch's, with its checkpoint). A dry run is no pass: it plans only what real runs have confirmed,
    so a run executing its plan (`from_plan`) deletes nothing fewer real runs saw."""
    if not found.orphans:
        return
    if passes.this is None and passes.confirmations == 1:
        return  # a dry run's first sight is enough: nothing to ask
    statement = {
        "bucket": bucket,
        "keys": [key for key, _, _ in found.orphans],
        "sizes": [size for _, size, _ in found.orphans],
        "modified": [modified for _, _, modified in found.orphans],
    }
    if passes.this is None:  # a dry run: the latest real pass's sightings, not counting itself
        rows = conn.execute(queries.load("reconcile/select_sightings"), {**statement, "latest": passes.previous})
        seen = {key: in_a_row for key, in_a_row in rows}
    else:
        rows = conn.execute(
            queries.load("reconcile/upsert_sightings"),
            {**statement, "pass": passes.this, "previous": passes.previous},
        )
        seen = {key: in_a_row for key, in_a_row in rows}
    confirmed = [o for o in found.orphans if seen.get(o[0], 0) >= passes.confirmations]
    found.waiting += [(key, size) for key, size, _ in found.orphans if seen.get(key, 0) < passes.confirmations]
    found.orphans = confirmed
