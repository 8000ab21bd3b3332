"""Seed 003: generation-based blob garbage collection with a bloom filter (Apache James ADR 39).

**Writing** is the application's (`demo_app.mail`): content is deduplicated within the current
reference generation only, a blob id is `{sha256 of the content}-g{generation}`
(`blobgc.kinds.generations.layouts.mail_blob_id`), and deleting a `gen.reference` row records a `gen.deletion`
row in the same transaction (a trigger), so no caller can forget one.

**Collecting plans first, then deletes exactly its plan** (issue 20, `blobgc.core.plans`).
`open_generation` starts a new generation (once per run). `plan_generation` then plans one
generation `g <= current - 2` (the ADR's n-2 rule): it streams every live reference to a blob of
`g` into a bloom filter, walks the blobs with pending deletions, and plans those the filter has
never seen (part `generation {g}`: their blob ids, `mail/` keys and sizes), deleting nothing.
Blobs the filter holds keep their deletions, for the next run: the filter is salted per attempt,
so a false positive does not protect the same garbage forever. A bloom filter only errs towards
keeping, and a scan that fails raises before anything is planned. After the gate,
`execute_plan_part` deletes the plan's blobs, re-checking each one *exactly* (no filter): a blob
that a reference points at again is skipped and recorded, never deleted; the others lose their
`gen.blob` rows and deletions, and their objects are owed through the outbox. A run with Param
`from_plan` executes a dry run's plan this way and plans nothing.

**Races.** The n-2 rule alone relies on timing: a writer that read the current generation just
before two switches could still be adding a reference to a blob of `g`. So writers hold the
generation they write into shared until they commit; the planner holds it alone from before its
scan until its plan is made, and the execution holds it alone in each transaction that re-checks
and deletes (`blobgc.core.locks`). Either the writer committed first (the scan, or the re-check,
sees its reference) or it waits and then finds a newer current generation, or the blob gone.

**The filter** is rbloom's `Bloom` (Rust, maintained, the optimal `-n ln p / ln² 2` bits: 1.20 MB
per million entries at 1%), sized for the number of blobs in the generation, so it never holds
more distinct entries than it was sized for and its false-positive rate stays at or under the
Param. Entries are the blob ids prefixed with a random salt per attempt and hashed by Python's
keyed SipHash, which keeps adding at millions a second (a hash function written in Python cost
20x that); nothing is persisted, so the hash need not be stable across processes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg import IsolationLevel

from blobgc.core import queries
from blobgc.core.locks import collecting_generation, hold_generation_alone, hold_generation_opening
from blobgc.core.objects import check_batch_size
from blobgc.core.outbox import record_deletions
from blobgc.core.plans import (
    add_plan_item,
    pending_items,
    record_outcome,
    restart_planning,
)
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, add_counts
from blobgc.core.sizes import human_bytes
from blobgc.kinds.generations.layouts import MAIL_BLOBS, mail_key

if TYPE_CHECKING:
    from rbloom import Bloom

log = logging.getLogger(__name__)

SOURCE = MAIL_BLOBS.source  # the deletion-log source of mail objects
GENERATION_LAG = 2  # the ADR's rule: collect only generations at most current - 2
SCAN_PAGE = 50_000  # references fetched per round trip of the reference scan


class GenerationError(RuntimeError):
    """A generation that may not be collected (too recent)."""


# ---------------------------------------------------------------------------------- opening generations
@dataclass(frozen=True)
class OpenedGeneration(TaskResult):
    generation: int = 0  # the run's generation: on a dry run, the one a real run would open now
    opened: bool = False  # False: a retry found its run's generation, or a dry run opened nothing
    plans: bool = True  # False: the run executes a dry run's plan (Param from_plan) and plans nothing itself

    @property
    def collectable(self) -> int:
        """The newest generation this run may collect."""
        return self.generation - GENERATION_LAG


def open_generation(conn: psycopg.Connection, run: RunRef, *, plans: bool = True) -> OpenedGeneration:
    """Open the run's new reference generation; a retry of the same run gets the same one back.

    A dry run opens nothing and reports the generation a real run would open. `plans` False: the run
    executes a dry run's plan (it still opens its generation, as every run does) and plans nothing.
    """
    key = {"dag_id": run.dag_id, "run_id": run.run_id}
    with conn.transaction():
        hold_generation_opening(conn)
        row = conn.execute(
            queries.load("generations/select_opened_generation", "blobgc.kinds.generations"), key
        ).fetchone()
        if row is not None:
            log.info("run %s already opened generation %d", run.run_id, row[0])
            return OpenedGeneration(row[0], opened=False, plans=plans)
        if run.dry_run:
            current = queries.one_row(
                conn.execute(queries.load("generations/select_current_generation", "blobgc.kinds.generations"))
            )[0]
            return OpenedGeneration((current or 0) + 1, opened=False, plans=plans)
        (generation,) = queries.one_row(
            conn.execute(queries.load("generations/insert_generation", "blobgc.kinds.generations"), key)
        )
    log.info("opened reference generation %d", generation)
    return OpenedGeneration(generation, opened=True, plans=plans)


def eligible_generations(conn: psycopg.Connection, opened: OpenedGeneration) -> list[int]:
    """The generations the run may collect that have pending deletions, oldest first; none when it plans nothing."""
    if not opened.plans:
        return []
    return [
        r[0]
        for r in conn.execute(
            queries.load("generations/select_eligible_generations", "blobgc.kinds.generations"),
            {"up_to": opened.collectable},
        )
    ]


# ------------------------------------------------------------------------------------------ collecting
@dataclass
class ReferenceFilter:
    """The salted bloom filter of one generation's live references."""

    salt: str
    bloom: Bloom
    capacity: int
    references: int = 0

    @classmethod
    def empty(cls, capacity: int, false_positive_rate: float, salt: str | None = None) -> ReferenceFilter:
        from rbloom import Bloom

        return cls(salt or os.urandom(8).hex() + ":", Bloom(max(capacity, 1), false_positive_rate), max(capacity, 1))

    def add(self, blob_ids: list[str]) -> None:
        salt = self.salt
        self.bloom.update([salt + b for b in blob_ids])
        self.references += len(blob_ids)

    def __contains__(self, blob_id: str) -> bool:
        return self.salt + blob_id in self.bloom

    @property
    def size_bytes(self) -> int:
        return self.bloom.size_in_bits // 8


def build_reference_filter(
    conn: psycopg.Connection,
    generation: int,
    false_positive_rate: float,
    *,
    salt: str | None = None,
    page_size: int = SCAN_PAGE,
    on_page: Callable[[int], None] | None = None,
) -> ReferenceFilter:
    """Stream every live reference to a blob of `generation` into a new salted filter.

    One read-only REPEATABLE READ transaction: the capacity and the references come from one
    snapshot. Any error (a lost connection, a cancelled query) raises; a partial filter is never
    returned. `on_page(references so far)` is called after each page, for progress.
    """
    previous = conn.isolation_level, conn.read_only
    conn.isolation_level, conn.read_only = IsolationLevel.REPEATABLE_READ, True
    try:
        with conn.transaction():
            (capacity,) = queries.one_row(
                conn.execute(
                    queries.load("generations/count_generation_blobs", "blobgc.kinds.generations"),
                    {"generation": generation},
                )
            )
            refs = ReferenceFilter.empty(capacity, false_positive_rate, salt)
            # every row will be read: plan for the whole result, not for a cursor's fast first rows
            conn.execute("SET LOCAL cursor_tuple_fraction = 1.0")
            with conn.cursor(name=f"gen_references_{generation}", binary=True) as cursor:
                cursor.itersize = page_size
                cursor.execute(
                    queries.load("generations/select_live_references", "blobgc.kinds.generations"),
                    {"generation": generation},
                )
                while page := cursor.fetchmany(page_size):
                    refs.add([r[0] for r in page])
                    if on_page is not None:
                        on_page(refs.references)
    finally:
        if not conn.closed:
            conn.isolation_level, conn.read_only = previous
    return refs


def plan_part(generation: int) -> str:
    """The name of a generation's part of a run's plan (and of its dry-run report)."""
    return f"generation {generation}"


def generation_of_part(part: str) -> int:
    """The generation a plan part (`plan_part`) belongs to."""
    prefix = plan_part(0)[:-1]
    if not part.startswith(prefix) or not part[len(prefix) :].isdigit():
        raise ValueError(f"{part!r} is not a part of a blobgc_generations plan (expected {prefix!r} and a number)")
    return int(part[len(prefix) :])


@dataclass
class GenerationPlan(TaskResult):
    """One generation's plan: its reference scan, and the blobs the filter has never seen (on a dry run, the report)."""

    generation: int
    references_scanned: int = 0
    filter_bytes: int = 0
    candidates: int = 0  # distinct blobs with pending deletions
    blobs_planned: int = 0  # blobs with a row, planned for deletion with their mail/ objects
    bytes_planned: int = 0
    deletions_planned: int = 0  # deletions that go with them (and with row-less blob ids)
    blobs_kept: int = 0  # in the filter: referenced, or a false positive left for a later run


@dataclass
class GenerationExecution(TaskResult):
    """What executing one generation's part of a plan did."""

    generation: int = 0
    items: int = 0
    blobs_deleted: int = 0
    bytes_deleted: int = 0  # the deleted blobs' bytes, their objects owed (reclaimed only once gone from storage)
    deletions_cleared: int = 0
    skipped_rereferenced: int = 0  # planned blob ids kept: referenced again since the plan (or gone meanwhile)


def check_collectable(generation: int, collectable: int) -> None:
    if generation > collectable:
        raise GenerationError(
            f"generation {generation} is too recent to collect: this run may collect "
            f"generations up to {collectable} (current - {GENERATION_LAG})"
        )


def check_old_enough(conn: psycopg.Connection, generation: int) -> None:
    """Refuse a generation newer than the database's current generation - 2."""
    current = queries.one_row(
        conn.execute(queries.load("generations/select_current_generation", "blobgc.kinds.generations"))
    )[0]
    if current is None or generation > current - GENERATION_LAG:
        raise GenerationError(f"generation {generation} is too recent to collect: the current generation is {current}")


def plan_generation(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    generation: int,
    collectable: int,
    bucket: str,
    false_positive_rate: float = 0.01,
    batch_size: int = 1000,
    salt: str | None = None,
    scan_page: int = SCAN_PAGE,
    on_scan_page: Callable[[int], None] | None = None,
    workers: int = 1,
    connect: Callable[[], psycopg.Connection] | None = None,
) -> GenerationPlan:
    """Plan one generation's collection: its blobs with pending deletions that no live reference names.

    `collectable` is the newest generation the run may collect (its own generation - 2); anything
    newer is refused. The generation is held alone from before the reference scan to the end of the
    walk (see the module's "Races"), and the filter is built completely before anything is planned.
    Then each batch of `batch_size` candidate blobs the filter has never seen becomes one plan item
    (part `generation {n}`: their ids, `mail/` keys and sizes; ids with no row at all carry no key).
    Nothing is deleted. With `workers` > 1 and `connect`, that many connections walk disjoint ranges
    of the candidates side by side. A retry plans its generation again from scratch (with a new salt).
    On a dry run this is also the report: its keys in `blobgc.deletion_log` (dry_run = true).
    """
    check_batch_size(batch_size)
    if not 0 < false_positive_rate < 1:
        raise ValueError(f"false_positive_rate must be between 0 and 1, not {false_positive_rate}")
    check_collectable(generation, collectable)
    part = plan_part(generation)
    restart_planning(conn, run, part)  # a retried planning task plans (and a dry run reports) its generation once
    result = GenerationPlan(generation)
    with collecting_generation(conn, generation):
        if not run.dry_run:
            check_old_enough(conn, generation)
        refs = build_reference_filter(
            conn, generation, false_positive_rate, salt=salt, page_size=scan_page, on_page=on_scan_page
        )
        result.references_scanned, result.filter_bytes = refs.references, refs.size_bytes
        log.info(
            "generation %d: %d live references in a %d-byte filter (capacity %d, p=%g)",
            generation,
            refs.references,
            refs.size_bytes,
            refs.capacity,
            false_positive_rate,
        )
        ranges = split_candidates(conn, generation, workers if connect is not None else 1)
        if len(ranges) == 1 or connect is None:  # one range unless `connect` was given
            parts = [walk_candidates(conn, run, refs, ranges[0], bucket, batch_size, generation)]
        else:

            def walk_on_own_connection(bounds: tuple[str, str | None]) -> GenerationPlan:
                with connect() as own:
                    return walk_candidates(own, run, refs, bounds, bucket, batch_size, generation)

            with ThreadPoolExecutor(len(ranges)) as pool:
                parts = list(pool.map(walk_on_own_connection, ranges))
        for walked in parts:
            for name in ("candidates", "blobs_kept", "blobs_planned", "bytes_planned", "deletions_planned"):
                setattr(result, name, getattr(result, name) + getattr(walked, name))
    with conn.transaction():
        if run.dry_run:
            add_counts(
                conn,
                run,
                rows=result.blobs_planned,
                objects=result.blobs_planned,
                bytes_=result.bytes_planned,
                part=part,
            )
        nothing_to_do = run.dry_run or not (result.blobs_planned or result.deletions_planned)
        conn.execute(
            queries.load("generations/upsert_planned_collection", "blobgc.kinds.generations"),
            {
                "dag_id": run.dag_id,
                "run_id": run.run_id,
                "generation": generation,
                "dry_run": run.dry_run,
                "false_positive_rate": false_positive_rate,
                "filter_bytes": result.filter_bytes,
                "references_scanned": result.references_scanned,
                "kept": result.blobs_kept,
                "blobs": result.blobs_planned if run.dry_run else 0,
                "bytes": result.bytes_planned if run.dry_run else 0,
                "deletions": result.deletions_planned if run.dry_run else 0,
                "finished": nothing_to_do,
            },
        )
    log.info(
        "generation %d: %d blobs with deletions; the plan deletes %d (%s) and %d deletions; %d kept "
        "(referenced, or a false positive left for a later run)%s",
        generation,
        result.candidates,
        result.blobs_planned,
        human_bytes(result.bytes_planned),
        result.deletions_planned,
        result.blobs_kept,
        " [dry run: nothing changed]" if run.dry_run else "",
    )
    return result


def split_candidates(conn: psycopg.Connection, generation: int, parts: int) -> list[tuple[str, str | None]]:
    """About `parts` ranges [lo, hi) of the generation's blob ids with deletions, of similar size."""
    if parts <= 1:
        return [("", None)]
    (n,) = queries.one_row(
        conn.execute(
            queries.load("generations/count_deletions", "blobgc.kinds.generations"), {"generation": generation}
        )
    )
    cuts: list[str] = []
    for k in range(1, parts):
        row = conn.execute(
            queries.load("generations/select_deleted_blob_id_at", "blobgc.kinds.generations"),
            {"generation": generation, "offset": n * k // parts},
        ).fetchone()
        if row and (not cuts or row[0] > cuts[-1]):
            cuts.append(row[0])
    edges = ["", *cuts]
    return list(zip(edges, [*cuts, None], strict=True))


def walk_candidates(
    conn: psycopg.Connection,
    run: RunRef,
    refs: ReferenceFilter,
    bounds: tuple[str, str | None],
    bucket: str,
    batch_size: int,
    generation: int,
) -> GenerationPlan:
    """Walk the blobs with deletions in [lo, hi) in batches: those not in the filter are planned."""
    result = GenerationPlan(generation)
    after, hi = bounds
    first = True
    while True:
        page = [
            r[0]
            for r in conn.execute(
                queries.load("generations/select_deleted_blob_ids", "blobgc.kinds.generations"),
                {"generation": generation, "after": after, "inclusive": first, "hi": hi, "limit": batch_size},
            )
        ]
        if not page:
            return result
        first, after = False, page[-1]
        unreferenced = [b for b in page if b not in refs]
        result.candidates += len(page)
        result.blobs_kept += len(page) - len(unreferenced)
        if unreferenced:
            plan_batch(conn, run, result, unreferenced, bucket)


def plan_batch(conn: psycopg.Connection, run: RunRef, result: GenerationPlan, blob_ids: list[str], bucket: str) -> None:
    """One plan item: the batch's blobs of the generation (and its row-less blob ids), in one transaction."""
    part = plan_part(result.generation)
    with conn.transaction():
        ids, sizes, rowless, deletions = queries.one_row(
            conn.execute(
                queries.load("generations/select_collectable_blobs", "blobgc.kinds.generations"),
                {"blob_ids": blob_ids, "generation": result.generation},
            )
        )
        keys = [mail_key(b) for b in ids]
        n_bytes = sum(s or 0 for s in sizes)
        add_plan_item(
            conn,
            run,
            part=part,
            collection=None,
            source=SOURCE,
            bucket=bucket,
            keys=keys,
            sizes=sizes,
            row_ids=[*ids, *rowless],
        )  # no `rows`: a dry run's counts are written once, by plan_generation (parallel walkers would race on them)
    result.blobs_planned += len(ids)
    result.bytes_planned += n_bytes
    result.deletions_planned += deletions


# ---------------------------------------------------------------------------------- executing the plan
def execute_plan_part(conn: psycopg.Connection, run: RunRef, *, part: str) -> GenerationExecution:
    """Delete exactly one generation's part of `run`'s plan, an item per transaction, re-checking each blob exactly.

    Each transaction holds the generation alone (as the collector's scan and the drain's guard do: a
    writer adding a reference to one of its blobs is waited for, and its reference is then seen), then
    deletes the item's blobs that no `gen.reference` points at now, with their deletions, and owes their
    `mail/` objects (never a key outside the item). A blob referenced again since the plan is skipped,
    recorded in `blobgc.plan_outcome` and kept with its deletions. A retry skips the items done.
    """
    generation = generation_of_part(part)
    result = GenerationExecution(generation)
    if run.dry_run:
        return result
    check_old_enough(conn, generation)
    figures = {"dag_id": run.dag_id, "run_id": run.run_id, "generation": generation}
    for item in pending_items(conn, run, part=part, collection=None):
        planned_keys = set(item.keys)
        row_ids = item.row_ids or []
        with_rows = [b for b in row_ids if mail_key(b) in planned_keys]
        rowless = [b for b in row_ids if mail_key(b) not in planned_keys]
        with conn.transaction():
            hold_generation_alone(conn, generation)
            ids, sizes, cleared_rowless, cleared = queries.one_row(
                conn.execute(
                    queries.load("generations/delete_planned_blobs", "blobgc.kinds.generations"),
                    {"blob_ids": with_rows, "rowless_ids": rowless, "generation": generation},
                )
            )
            keys = [mail_key(b) for b in ids]
            record_deletions(conn, run, source=item.source, bucket=item.bucket, keys=keys, sizes=sizes, part=part)
            gone = {*ids, *cleared_rowless}
            skipped = [b for b in row_ids if b not in gone]
            record_outcome(
                conn,
                run,
                item,
                rows_deleted=len(ids),
                objects_owed=len(keys),
                skipped_ids=skipped,
                skipped_keys=[mail_key(b) for b in with_rows if b not in gone],
            )
            add_counts(conn, run, rows=len(ids))
            n_bytes = sum(s or 0 for s in sizes)
            conn.execute(
                queries.load("generations/add_executed_counts", "blobgc.kinds.generations"),
                {
                    **figures,
                    "blobs": len(ids),
                    "bytes": n_bytes,
                    "deletions": cleared,
                    "kept": len(skipped),
                    "finished": False,
                },
            )
        if skipped:
            log.info(
                "generation %d: %d planned blobs referenced again since the plan (or gone meanwhile): kept (%s)",
                generation,
                len(skipped),
                skipped[:5],
            )
        result.items += 1
        result.blobs_deleted += len(ids)
        result.bytes_deleted += n_bytes
        result.deletions_cleared += cleared
        result.skipped_rereferenced += len(skipped)
    with conn.transaction():
        conn.execute(
            queries.load("generations/add_executed_counts", "blobgc.kinds.generations"),
            {**figures, "blobs": 0, "bytes": 0, "deletions": 0, "kept": 0, "finished": True},
        )
    log.info(
        "generation %d: %d plan items; deleted %d blobs (%s) and %d deletions, their objects owed; %d planned "
        "blobs skipped as referenced again",
        generation,
        result.items,
        result.blobs_deleted,
        human_bytes(result.bytes_deleted),
        result.deletions_cleared,
        result.skipped_rereferenced,
    )
    return result


@dataclass
class CollectResult(TaskResult):
    """One generation planned and its plan executed at once (`tests.support.gated.collect_generation`); on a dry
    run, what would go."""

    generation: int
    references_scanned: int = 0
    filter_bytes: int = 0
    candidates: int = 0
    blobs_deleted: int = 0
    bytes_deleted: int = 0
    deletions_cleared: int = 0
    blobs_kept: int = 0  # kept by the filter, or skipped at execution as referenced again
    skipped_rereferenced: int = 0


def summarize(conn: psycopg.Connection, run: RunRef) -> dict:
    """The run's collections, per generation and in total, for its report."""
    rows = conn.execute(
        queries.load("generations/summarize_collections", "blobgc.kinds.generations"),
        {"dag_id": run.dag_id, "run_id": run.run_id},
    ).fetchall()
    per_generation = [
        {
            "generation": g,
            "dry_run": dry,
            "references_scanned": scanned,
            "filter_bytes": fbytes,
            "blobs_deleted": blobs,
            "bytes_deleted": n_bytes,
            "deletions_cleared": cleared,
            "blobs_kept": kept,
            "attempts": attempts,
            "finished": finished,
        }
        for g, dry, scanned, fbytes, blobs, n_bytes, cleared, kept, attempts, finished in rows
    ]
    totals = {
        k: sum(p[k] or 0 for p in per_generation)
        for k in ("blobs_deleted", "bytes_deleted", "deletions_cleared", "blobs_kept")
    }
    return {"generations": per_generation, **totals}
