"""Seed 000's sweep, for any collection: delete rows unused for longer than the grace, never one referenced at
delete time, and owe every key template's object.

Each batch is one transaction: claim rows with FOR UPDATE SKIP LOCKED (a writer adding a reference
holds a KEY SHARE lock, so its row is skipped), delete those that no reference points at (the
DELETE statement re-checks every foreign key and declared reference itself, so a key declared
ON DELETE CASCADE or SET NULL can never remove the referencing rows), and log their object keys and
owe their deletion in the same transaction. The objects themselves are deleted afterwards from the
outbox (`blobgc.core.outbox.delete_owed_objects`), which counts only those that existed.

`app_blob` is claimed by its own `unused`/`updated_at` columns; any other collection by its mark
table `blobgc.mark_<name>` (see `blobgc.collectors.mark`). A collection that names a `created_at`
column never loses a row created after the cut-off, whatever its mark says.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from blobgc.core.collections import BoundCollection, CollectionSource, column_modes
from blobgc.core.key_space import KeyRange, split_key_space
from blobgc.core.outbox import record_deletions
from blobgc.core.plans import (
    PlanItem,
    add_plan_item,
    item_cutoff,
    pending_items,
    record_outcome,
    restart_planning,
)
from blobgc.core.queries import Statement, one_row
from blobgc.core.references import (
    ReferencesChanged,
    ReferenceSet,
    check_unchanged,
    discover_references,
    referenced_ids_query,
    unreferenced_condition,
)
from blobgc.core.replica import reading
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef, add_counts
from blobgc.core.sizes import human_bytes
from blobgc.engine import Deletion, Reported, Tasks, Work

log = logging.getLogger(__name__)

# ON DELETE RESTRICT raises restrict_violation (23001); NO ACTION raises foreign_key_violation (23503).
REFERENCE_VIOLATIONS = (psycopg.errors.RestrictViolation, psycopg.errors.ForeignKeyViolation)
SAMPLE_KEYS = 20


@dataclass
class SweepResult(TaskResult):
    """Rows deleted, objects owed and bytes, or on a dry run what would go (the sample keys stay in the log)."""

    rows_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    kept_referenced: int = 0
    batches: int = 0
    sample_keys: list[str] = local()
    # collection -> why the rows of the task's id range were or were not planned (`count_not_planned`)
    not_planned: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepStatements:
    """A collection's four statements: claim a batch, delete (or, dry, preview) the unreferenced, forget the kept."""

    select_batch: sql.Composed
    delete: sql.Composed
    preview: sql.Composed
    forget_kept: sql.Composed


def statements(bound: BoundCollection, refs: ReferenceSet, *, dry_run: bool) -> SweepStatements:
    c = bound.collection
    b = sql.Identifier("b")
    size = sql.SQL("{b}.{col}").format(b=b, col=sql.Identifier(c.size)) if c.size else sql.SQL("NULL::bigint")
    created_before = (
        sql.SQL("t.{c} < %(cutoff)s").format(c=sql.Identifier(c.created_at)) if c.created_at else sql.SQL("true")
    )
    parts = {
        "unreferenced": unreferenced_condition(refs, "b"),
        "keys": bound.key_array("b"),
        "size": size,
        "created_before": created_before,
        "locking": sql.SQL("") if dry_run else sql.SQL("FOR UPDATE OF t SKIP LOCKED"),
    }

    def load(name: str | Statement) -> sql.Composed:
        return bound.statement(name, **parts)

    if (mode := c.mode) is not None:  # the kind's own statements, on the table's own mark columns
        return SweepStatements(
            load(mode.statement("sweep/select_unused_rows")),
            load(mode.statement("sweep/delete_rows")),
            load(mode.statement("sweep/select_unreferenced_rows")),
            load(mode.statement("sweep/update_rows_used")),
        )
    return SweepStatements(
        load("collections/select_unused_rows"),
        load("collections/delete_rows"),
        load("collections/select_unreferenced_rows"),
        load("collections/delete_marks"),
    )


def delete_unreferenced(conn: psycopg.Connection, statement: sql.Composed, ids: list[str]) -> list[tuple]:
    """Delete the rows of `ids` that no reference points at, inside a savepoint; returns (id, size, key values,
    row image).

    The statement re-checks every reference. Should a foreign key still make it fail (a reference the
    re-check did not know of), ON DELETE RESTRICT is the last guard: the batch is split, and the row
    that fails alone is kept.
    """
    try:
        with conn.transaction():
            return conn.execute(statement, {"ids": ids}).fetchall()
    except REFERENCE_VIOLATIONS:
        if len(ids) == 1:
            return []
    mid = len(ids) // 2
    return delete_unreferenced(conn, statement, ids[:mid]) + delete_unreferenced(conn, statement, ids[mid:])


def range_part(key_range: KeyRange, collection: str | None = None) -> str:
    """The name of a sweep's share of a plan: its collection (none for a column-mode one, as before) and id range."""
    ids = f"ids {key_range[0] or 'start'}..{key_range[1] or 'end'}"
    return ids if collection is None or collection in column_modes() else f"{collection} {ids}"


def sweep_batch(
    conn: psycopg.Connection,
    run: RunRef,
    bound: BoundCollection,
    refs: ReferenceSet,
    found: SweepStatements,
    *,
    part: str,
    params: dict,
    item: PlanItem | None = None,
) -> tuple[list, list, list[str], list[str], int] | None:
    """One batch in one transaction: claim, delete what no reference points at, log and owe its objects.

    Returns (claimed rows, deleted rows, kept ids, owed keys, bytes), or None when no row is left.
    Raises ReferencesChanged (the transaction rolled back) when a foreign key appeared meanwhile. With a plan
    `item` (whose ids `params["plan_ids"]` are), what became of each of its ids is recorded in the same
    transaction: a row not claimed or not deleted is skipped, as referenced again since the plan was made.
    """
    with conn.transaction():
        batch = conn.execute(found.select_batch, params).fetchall()
        if not batch:
            if item is not None:
                record_outcome(conn, run, item, skipped_ids=item.row_ids or [])
            return None
        ids = [row[0] for row in batch]
        if item is not None:  # a row whose objects are no longer the plan's is not the plan's to delete
            ids = unchanged_since_plan(conn, bound, found, item, ids)
        if run.dry_run:
            deleted = [(*row, None) for row in conn.execute(found.preview, {"ids": ids}).fetchall()]
        elif not ids:
            deleted = []
        else:
            deleted = delete_unreferenced(conn, found.delete, ids)
            check_unchanged(conn, refs)
        gone = {row[0] for row in deleted}
        kept = [i for i in ids if i not in gone]  # referenced: marked used again
        if kept and not run.dry_run:
            conn.execute(found.forget_kept, {"ids": kept})
        keys, sizes_out = owned_objects(deleted)
        record_deletions(
            conn,
            run,
            source=bound.collection.source,
            bucket=bound.bucket,
            keys=keys,
            sizes=sizes_out,
            rows=[image for *_, image in deleted if image is not None],
            part=part,
        )
        batch_bytes = sum(size or 0 for _, size, *_rest in deleted)
        if item is not None:
            record_outcome(
                conn,
                run,
                item,
                rows_deleted=len(deleted),
                objects_owed=len(keys),
                skipped_ids=[i for i in item.row_ids or [] if i not in gone],
            )
        if run.dry_run:
            add_counts(
                conn, run, rows=len(deleted), objects=len(keys), bytes_=batch_bytes, part=part, collection=bound.name
            )
        else:
            add_counts(conn, run, rows=len(deleted), collection=bound.name)
    return batch, deleted, kept, keys, batch_bytes


def owned_objects(rows: list[tuple]) -> tuple[list[str], list[int | None]]:
    """The objects of `rows` (id, size, the keys it forms, ...): the key of each template, formed in SQL
    (`KeyTemplate.expression`; a NULL column forms none), and the size column's size on the first template's
    object (the others' sizes unknown)."""
    keys: list[str] = []
    sizes: list[int | None] = []
    for _id, size, formed, *_rest in rows:
        for i, key in enumerate(formed):
            if key is not None:
                keys.append(key)
                sizes.append(size if i == 0 else None)
    return keys, sizes


def unchanged_since_plan(
    conn: psycopg.Connection, bound: BoundCollection, found: SweepStatements, item: PlanItem, ids: list
) -> list:
    """The claimed `ids` whose objects are still the plan item's; a row whose key columns changed since the plan
    was made (its keys would not be the plan's) is left out: skipped, never deleted."""
    planned = set(item.keys)
    changed = {
        str(row_id)
        for row_id, _size, formed in conn.execute(found.preview, {"ids": ids}).fetchall()
        if not {key for key in formed if key is not None} <= planned
    }
    if changed:
        log.warning(
            "%s: %d planned rows have other objects now than when the plan was made: skipped (%s)",
            bound.name,
            len(changed),
            sorted(changed)[:5],
        )
    return [i for i in ids if str(i) not in changed]


# The counts of the run details' `not_planned` (per collection): every row considered is in exactly one of the others.
NOT_PLANNED_COUNTS = ("considered", "planned", "referenced", "not_marked", "within_grace", "young_created_at")


def count_not_planned(
    conn: psycopg.Connection,
    bound: BoundCollection,
    refs: ReferenceSet,
    *,
    cutoff: datetime,
    grace: timedelta,
    key_range: KeyRange = (None, None),
) -> dict[str, Any]:
    """Why the rows of one id range are or are not in the plan, in one set-based statement: the first run on a fresh
    install then says why it plans nothing (not marked yet, or unused but within the grace) and when it will.

    Each row counts once, in the first of: referenced now; not marked unused (app_blob's `unused` false, or no row
    in `blobgc.mark_<name>`: no mark has found it unused yet); unused since the cut-off or later (`within_grace`);
    created since the cut-off or later (`young_created_at`); else planned. `first_eligible_at` is the earliest
    moment a row of the last two becomes eligible: the later of its unused-since and created_at, plus `grace`.
    """
    c = bound.collection
    created_at = (
        sql.SQL("t.{c}::timestamptz").format(c=sql.Identifier(c.created_at))
        if c.created_at
        else sql.SQL("NULL::timestamptz")
    )
    # the plan takes a row only if `created_at < cutoff`: a NULL created_at is never planned, nor ever eligible
    young = sql.SQL("coalesce({c} >= %(cutoff)s, true)").format(c=created_at) if c.created_at else sql.SQL("false")
    never = sql.SQL("{c} IS NULL").format(c=created_at) if c.created_at else sql.SQL("false")
    parts: dict[str, sql.Composable] = {
        "created_at": created_at,
        "young": young,
        "never_eligible": never,
        "referenced": referenced_ids_query(refs, "range"),
    }
    if c.column_mode:  # the table's own columns
        parts.update(unused=sql.SQL("t.unused"), unused_since=sql.SQL("t.updated_at"), mark_join=sql.SQL(""))
    else:  # blobgc.mark_<name>; before the collection's first real mark there is none: no row has been found unused
        marks = (
            c.mark_table
            if bound.mark_table_exists(conn)
            else sql.SQL("(SELECT NULL::{t} AS id, NULL::timestamptz AS unused_since WHERE false)").format(
                t=sql.SQL(bound.id_type)
            )
        )
        parts.update(
            unused=sql.SQL("m.id IS NOT NULL"),
            unused_since=sql.SQL("m.unused_since"),
            # the range's bounds on the marks too: the planner does not carry them over the join (each of the
            # plan's id ranges would read the whole mark table)
            mark_join=sql.SQL(
                "LEFT JOIN {marks} AS m ON m.id = t.{id} AND (%(lo)s::{type} IS NULL OR m.id >= %(lo)s::{type}) "
                "AND (%(hi)s::{type} IS NULL OR m.id < %(hi)s::{type})"
            ).format(marks=marks, id=sql.Identifier(c.id), type=sql.SQL(bound.id_type)),
        )
    statement = bound.statement("sweep/count_row_states", **parts)
    row = one_row(conn.execute(statement, {"cutoff": cutoff, "lo": key_range[0], "hi": key_range[1]}))
    counts: dict[str, Any] = {name: int(n) for name, n in zip(NOT_PLANNED_COUNTS, row[:-1], strict=True)}
    waiting_since = row[-1]
    counts["first_eligible_at"] = (
        (waiting_since + grace).astimezone(UTC).isoformat() if waiting_since is not None else None
    )
    counts["grace_hours"] = grace.total_seconds() / 3600
    return counts


def merge_not_planned(entries: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Several id ranges' `not_planned` (collection -> counts) as one: counts summed, the earliest first_eligible_at."""
    merged: dict[str, dict[str, Any]] = {}
    for entry in entries:
        for name, counts in entry.items():
            into = merged.setdefault(name, {**{n: 0 for n in NOT_PLANNED_COUNTS}, "first_eligible_at": None})
            for n in NOT_PLANNED_COUNTS:
                into[n] += int(counts.get(n) or 0)
            first = counts.get("first_eligible_at")
            if first and (
                into["first_eligible_at"] is None
                or datetime.fromisoformat(first) < datetime.fromisoformat(into["first_eligible_at"])
            ):
                into["first_eligible_at"] = first
            if counts.get("grace_hours") is not None:
                into["grace_hours"] = max(float(counts["grace_hours"]), float(into.get("grace_hours", 0)))
    return merged


def explain_not_planned(name: str, counts: Mapping[str, Any]) -> str:
    """One collection's (or id range's) `not_planned` counts in plain English, for the plan and report tasks' logs."""
    hours = counts.get("grace_hours")
    grace = f"{hours:g} h" if hours is not None else "the grace"
    first = counts.get("first_eligible_at")
    when = f"{datetime.fromisoformat(first).astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if first else None
    within, young = int(counts.get("within_grace", 0)), int(counts.get("young_created_at", 0))
    parts = [f"{int(counts.get('planned', 0)):,} planned"]
    if when and not young:
        parts.append(
            f"{within:,} unused but within their grace until {when} (grace {grace} from the mark that "
            "found them unused)"
        )
    else:
        parts.append(f"{within:,} unused but within their grace ({grace} from the mark that found them unused)")
    if young:
        parts.append(f"{young:,} unused but created less than {grace} ago (created_at)")
    parts.append(f"{int(counts.get('referenced', 0)):,} referenced")
    not_marked = int(counts.get("not_marked", 0))
    if not_marked:
        parts.append(
            f"{not_marked:,} not marked unused yet (no mark has found them unused since they appeared: run "
            "blobgc_mark first; the grace counts from the first mark)"
        )
    line = f"{name}: {int(counts.get('considered', 0)):,} rows considered: " + ", ".join(parts)
    if when and young:
        line += f"; the first of them becomes eligible at {when}"
    return line


@dataclass
class NotPlannedReport(TaskResult):
    """The report's `not_planned`, gathered from the planning tasks' results (`SweepResult.not_planned`, one id range
    each): collection -> rows considered and why those not planned were not, summed over the ranges. Its XCom form
    is that mapping itself, and gathering it logs one line per collection (`explain_not_planned`)."""

    not_planned: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_xcom(self) -> dict[str, Any]:
        return self.not_planned

    @classmethod
    def from_xcom(cls, data: dict[str, Any] | None) -> NotPlannedReport:
        return cls(cls.total([data] if data else []))

    @classmethod
    def total(cls, parts: list[dict[str, Any]] | None) -> dict[str, Any]:
        merged = merge_not_planned((part or {}).get("not_planned") or {} for part in parts or [])
        for name, counts in sorted(merged.items()):
            log.info("%s", explain_not_planned(name, counts))
        return merged


def plan_collection(
    conn: psycopg.Connection,
    run: RunRef,
    bound: BoundCollection,
    refs: ReferenceSet,
    *,
    cutoff: datetime,
    batch_size: int = 1000,
    key_range: KeyRange = (None, None),
    read: psycopg.Connection | None = None,
) -> SweepResult:
    """Plan the sweep of one id range of a collection: every row unused since before `cutoff` that no reference
    points at now, a batch at a time, into `run`'s plan (`blobgc.core.plans`) with the objects it owns.

    The candidates are read on `read` (a read replica, `blobgc.core.replica`; by default `conn`), the plan is
    written on `conn`, the primary: `execute_plan_part` re-checks every planned row there before deleting it.

    Nothing is locked or deleted. On a dry run this is also the run's report (counts and deletion log, as
    before plans existed). A retried task plans its range again from scratch. The result's `not_planned` says why
    the range's other rows were not planned (`count_not_planned`; the grace is the run's reference time minus
    `cutoff`, or the collection's own for a run without one), and the log says it in words.
    """
    lo, hi = key_range
    read = conn if read is None else read
    part = range_part(key_range, bound.name)
    restart_planning(conn, run, part)
    grace = (
        run.reference_time - cutoff if run.reference_time is not None else timedelta(hours=bound.collection.grace_hours)
    )
    counts = count_not_planned(read, bound, refs, cutoff=cutoff, grace=grace, key_range=key_range)
    log.info("%s", explain_not_planned(f"{bound.name} {range_part(key_range)}", counts))
    result = SweepResult(not_planned={bound.name: counts})
    if not bound.collection.column_mode and not bound.mark_table_exists(read):
        log.info("collection %s has not been marked yet: nothing to plan (run blobgc_mark first)", bound.name)
        return result
    found = statements(bound, refs, dry_run=True)
    after: str | None = None
    while True:
        # read before the primary's transaction opens: a replica's scan never holds a transaction open on the primary
        batch = read.execute(
            found.select_batch,
            {"cutoff": cutoff, "after": after, "lo": lo, "hi": hi, "batch_size": batch_size, "plan_ids": None},
        ).fetchall()
        if not batch:
            break
        after = batch[-1][0]
        rows = read.execute(found.preview, {"ids": [row[0] for row in batch]}).fetchall()
        keys, sizes = owned_objects(rows)
        with conn.transaction():
            add_plan_item(
                conn,
                run,
                part=part,
                collection=bound.name,
                source=bound.collection.source,
                bucket=bound.bucket,
                keys=keys,
                sizes=sizes,
                row_ids=[str(r[0]) for r in rows],
                modified_before=cutoff,
                rows=len(rows),
            )
            batch_bytes = sum(size or 0 for _, size, _ in rows)
        result.batches += 1
        result.rows_deleted += len(rows)
        result.objects_owed += len(keys)
        result.bytes_owed += batch_bytes
        result.kept_referenced += len(batch) - len(rows)
        if len(result.sample_keys) < SAMPLE_KEYS:
            result.sample_keys += keys[: SAMPLE_KEYS - len(result.sample_keys)]
        if len(batch) < batch_size:
            break
    log.info(
        "%s %s: the plan deletes %d rows, %d objects (%s); %d referenced rows are not in it; sample keys: %s",
        bound.name,
        part,
        result.rows_deleted,
        result.objects_owed,
        human_bytes(result.bytes_owed),
        result.kept_referenced,
        result.sample_keys[:5],
    )
    return result


@dataclass
class PlanExecution(SweepResult):
    """What executing part of a plan did: rows deleted and objects owed, and the rows skipped as referenced again."""

    items: int = 0
    skipped_rereferenced: int = 0


def execute_plan_part(
    conn: psycopg.Connection, run: RunRef, bound: BoundCollection, refs: ReferenceSet, *, cutoff: datetime, part: str
) -> PlanExecution:
    """Delete exactly the rows of one part of `run`'s plan, an item (a batch) per transaction, re-checking each.

    Each row is claimed again with FOR UPDATE SKIP LOCKED only if it is still unused since before `cutoff`, and
    deleted only if no reference points at it (the DELETE re-checks); anything else in the item is skipped and
    recorded. Rows outside the plan are never touched. A retry skips the items already dealt with.
    """
    result = PlanExecution()
    if run.dry_run:
        return result
    found = statements(bound, refs, dry_run=False)
    for item in pending_items(conn, run, part=part, collection=bound.name):
        ids = item.row_ids or []
        while True:
            try:
                done = sweep_batch(
                    conn,
                    run,
                    bound,
                    refs,
                    found,
                    part=part,
                    item=item,
                    params={
                        "cutoff": item_cutoff(item, cutoff),
                        "after": None,
                        "lo": None,
                        "hi": None,
                        "batch_size": max(len(ids), 1),
                        "plan_ids": ids,
                    },
                )
                break
            except ReferencesChanged:
                log.warning("the foreign keys to %s changed during the sweep: discovering them again", refs.table)
                refs = discover_references(conn, refs.table, refs.extra_sql, refs.id_column)
                found = statements(bound, refs, dry_run=False)
        result.items += 1
        if done is None:
            result.skipped_rereferenced += len(ids)
            continue
        _batch, deleted, _kept, keys, batch_bytes = done
        result.batches += 1
        result.rows_deleted += len(deleted)
        result.objects_owed += len(keys)
        result.bytes_owed += batch_bytes
        result.skipped_rereferenced += len(ids) - len(deleted)
    log.info(
        "%s %s: %d plan items; deleted %d rows, %d objects (%s) owed; %d rows skipped: referenced again, or "
        "no longer unused since before the cut-off",
        bound.name,
        part,
        result.items,
        result.rows_deleted,
        result.objects_owed,
        human_bytes(result.bytes_owed),
        result.skipped_rereferenced,
    )
    return result


# ------------------------------------------------------------------------------------- the planned deletion
@dataclass(frozen=True)
class Sweep(Deletion):
    """Seed 000's sweep over every collection as a planned deletion (`blobgc.engine.Deletion`), which `blobgc_sweep`
    is built from: each collection's ids cut into about `sweep_workers` ranges, each range planned (`plan_collection`)
    by its own task, each part executed (`execute_plan_part`); the drain deletes every key template's object.
    `collections` is where the run's collections come from (the collections file, in a DAG)."""

    collections: CollectionSource

    tasks = Tasks(shards="plan_shards", plan="plan_deletions", execute="delete_unused_blobs")
    reported = Reported(
        planned={"planned": SweepResult, "not_planned": NotPlannedReport}, executed=("swept", PlanExecution)
    )
    catch_up_drain = True  # earlier runs' debts are drained before this run's parts are executed
    labels = {
        "plan_deletions": "{% set s = task.op_kwargs['shard'] %}{{ s['collection'] }} ids "
        "{{ s['lo'] or 'start' }} .. {{ s['hi'] or 'end' }}",
        "delete_unused_blobs": "{{ task.op_kwargs['part']['part'] }}",
    }

    def grace(self, work: Work, bound: BoundCollection) -> float:
        """The collection's own grace, or the run's Param `grace_hours` where one is given and longer."""
        given = work.params.get("grace_hours")
        own = float(bound.collection.grace_hours)
        return own if given is None else max(float(given), own)

    def check(self, work: Work) -> None:
        collections = self.collections.checked(work.conn, work.params)
        self.collections.check_buckets(work.s3, collections)  # a missing bucket fails here, named with its collection

    def shards(self, work: Work, prepared: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [
            {"collection": bound.name, "lo": lo, "hi": hi}
            for bound in self.collections.checked(work.conn, work.params)
            for lo, hi in split_key_space(work.conn, work.params["sweep_workers"], bound.id_column)
        ]

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        bound = self.collections.one(work.conn, shard["collection"])
        with reading(work.reads, work.conn) as read:  # the replica when one is set: execute re-checks on the primary
            return plan_collection(
                work.conn,
                work.run,
                bound,
                self.collections.references(work.conn, bound),
                cutoff=work.cutoff(hours=self.grace(work, bound)),
                batch_size=work.params["batch_size"],
                key_range=(shard["lo"], shard["hi"]),
                read=read,
            )

    def execute(self, work: Work, part: dict[str, Any] | None) -> TaskResult:
        assert part is not None
        bound = self.collections.one(work.conn, part["collection"])
        return execute_plan_part(
            work.conn,
            work.run,
            bound,
            self.collections.references(work.conn, bound),
            cutoff=work.cutoff(hours=self.grace(work, bound)),
            part=part["part"],
        )
