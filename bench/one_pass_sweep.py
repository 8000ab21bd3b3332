"""The one-pass sweep, kept only as bench/plans.py's baseline: what blobgc_sweep did before it planned (issue 20).

Per batch of `batch_size` rows, in one transaction: claim with FOR UPDATE SKIP LOCKED, re-check every reference,
delete, log and owe the objects. No plan, no gate. No DAG runs this and the package no longer holds it; it is
here so that bench/plans.py can measure, in the same run, what planning before deleting costs. It is built from
the package's own statements and batch (`blobgc.collectors.sweep.statements`, `sweep_batch`), so it does the
database work a plan's execution does, minus the plan.
"""
from __future__ import annotations

import logging
from datetime import datetime

import psycopg

from blobgc.collectors.sweep import SweepResult, range_part, statements, sweep_batch
from blobgc.core.collections import BoundCollection
from blobgc.core.key_space import KeyRange
from blobgc.core.references import ReferenceSet, ReferencesChanged, discover_references
from blobgc.core.runs import RunRef, restart_dry_run_part

log = logging.getLogger(__name__)


def one_pass_sweep(conn: psycopg.Connection, run: RunRef, bound: BoundCollection, refs: ReferenceSet, *,
                   cutoff: datetime, batch_size: int = 1000, key_range: KeyRange = (None, None)) -> SweepResult:
    """Delete the collection's rows of `key_range` unused since before `cutoff`, a batch per transaction, owing their
    objects (on a dry run: report them)."""
    lo, hi = key_range
    part = range_part(key_range, bound.name)
    restart_dry_run_part(conn, run, part)  # a retried dry run reports its range once
    if not bound.collection.column_mode and not bound.mark_table_exists(conn):
        return SweepResult()
    found = statements(bound, refs, dry_run=run.dry_run)
    result = SweepResult()
    after: str | None = None
    while True:
        try:
            batch_result = sweep_batch(conn, run, bound, refs, found, part=part,
                                       params={"cutoff": cutoff, "after": after, "lo": lo, "hi": hi,
                                               "batch_size": batch_size, "plan_ids": None})
        except ReferencesChanged:  # a foreign key appeared: the batch rolled back; find the references again
            refs = discover_references(conn, refs.table, refs.extra_sql, refs.id_column)
            found = statements(bound, refs, dry_run=run.dry_run)
            continue
        if batch_result is None:
            break
        batch, deleted, kept, keys, batch_bytes = batch_result
        after = batch[-1][0]
        result.batches += 1
        result.rows_deleted += len(deleted)
        result.objects_owed += len(keys)
        result.bytes_owed += batch_bytes
        result.kept_referenced += len(kept)
        if len(batch) < batch_size:
            break
    log.info("%s: one pass deleted %d rows, owed %d objects", bound.name, result.rows_deleted, result.objects_owed)
    return result
