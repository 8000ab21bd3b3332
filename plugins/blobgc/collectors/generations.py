"""Seed 003: generation-based blob garbage collection with a bloom filter (Apache James ADR 39).

**Writing** is the application's (`demo_app.mail`): content is deduplicated within the current
reference generation only, a blob id is `{sha256 of the content}-g{generation}`
(`blobgc.core.keys.mail_blob_id`), and deleting a `gen.reference` row records a `gen.deletion`
row in the same transaction (a trigger), so no caller can forget one.

**Collecting.** `open_generation` starts a new generation (once per run). `collect_generation`
then collects one generation `g <= current - 2` (the ADR's n-2 rule): it streams every live
reference to a blob of `g` into a bloom filter, walks the blobs with pending deletions, and
deletes those the filter has never seen (their `gen.blob` rows and deletions, their objects
through the outbox). Blobs the filter holds keep their deletions, for the next run: the filter is
salted per attempt, so a false positive does not protect the same garbage forever. A bloom filter
only errs towards keeping, and a scan that fails raises before anything is deleted.

**Races.** The n-2 rule alone relies on timing: a writer that read the current generation just
before two switches could still be adding a reference to a blob of `g`. So writers hold the
generation they write into shared until they commit, and the collector holds it alone from before
its scan until its last deletion (`blobgc.core.locks`). Either the writer committed first (the scan
sees its reference) or it waits and then finds a newer current generation (it never touches `g`).

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

import psycopg
from psycopg import IsolationLevel

from blobgc.core import queries
from blobgc.core.keys import MAIL_BLOBS, mail_key
from blobgc.core.locks import collecting_generation, hold_generation_opening
from blobgc.core.objects import check_batch_size
from blobgc.core.outbox import record_deletions, record_in_batches
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef, add_counts

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

    @property
    def collectable(self) -> int:
        """The newest generation this run may collect."""
        return self.generation - GENERATION_LAG


def open_generation(conn: psycopg.Connection, run: RunRef) -> OpenedGeneration:
    """Open the run's new reference generation; a retry of the same run gets the same one back.

    A dry run opens nothing and reports the generation a real run would open.
    """
    key = {"dag_id": run.dag_id, "run_id": run.run_id}
    with conn.transaction():
        hold_generation_opening(conn)
        row = conn.execute(queries.load("generations/select_opened_generation"), key).fetchone()
        if row is not None:
            log.info("run %s already opened generation %d", run.run_id, row[0])
            return OpenedGeneration(row[0], opened=False)
        if run.dry_run:
            current = conn.execute(queries.load("generations/select_current_generation")).fetchone()[0]
            return OpenedGeneration((current or 0) + 1, opened=False)
        (generation,) = conn.execute(queries.load("generations/insert_generation"), key).fetchone()
    log.info("opened reference generation %d", generation)
    return OpenedGeneration(generation, opened=True)


def eligible_generations(conn: psycopg.Connection, opened: OpenedGeneration) -> list[int]:
    """The generations the run may collect that have pending deletions, oldest first."""
    return [r[0] for r in conn.execute(queries.load("generations/select_eligible_generations"),
                                       {"up_to": opened.collectable})]


# ------------------------------------------------------------------------------------------ collecting
@dataclass
class ReferenceFilter:
    """The salted bloom filter of one generation's live references."""

    salt: str
    bloom: object  # rbloom.Bloom
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
            (capacity,) = conn.execute(queries.load("generations/count_generation_blobs"),
                                       {"generation": generation}).fetchone()
            refs = ReferenceFilter.empty(capacity, false_positive_rate, salt)
            # every row will be read: plan for the whole result, not for a cursor's fast first rows
            conn.execute("SET LOCAL cursor_tuple_fraction = 1.0")
            with conn.cursor(name=f"gen_references_{generation}", binary=True) as cursor:
                cursor.itersize = page_size
                cursor.execute(queries.load("generations/select_live_references"), {"generation": generation})
                while page := cursor.fetchmany(page_size):
                    refs.add([r[0] for r in page])
                    if on_page is not None:
                        on_page(refs.references)
    finally:
        if not conn.closed:
            conn.isolation_level, conn.read_only = previous
    return refs


@dataclass
class CollectResult(TaskResult):
    """One generation's collection; on a dry run, what would go."""

    generation: int
    references_scanned: int = 0
    filter_bytes: int = 0
    candidates: int = 0  # distinct blobs with pending deletions
    blobs_deleted: int = 0
    bytes_reclaimed: int = 0
    deletions_cleared: int = 0
    blobs_kept: int = 0  # in the filter: referenced, or a false positive left for a later run
    keys: list[str] = local()  # a dry run's keys that would go
    sizes: list[int | None] = local()


def collect_generation(
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
) -> CollectResult:
    """Collect one generation: delete its blobs with pending deletions that no live reference names.

    `collectable` is the newest generation the run may collect (its own generation - 2); anything
    newer is refused. The generation is held exclusively throughout (see the module's "Races"). The
    filter is built completely before anything is deleted. Then each batch of `batch_size`
    candidate blobs is one transaction: delete the unreferenced blobs' rows and deletions, log and
    owe their `mail/` objects, count them. With `workers` > 1 and `connect`, that many connections
    walk disjoint ranges of the candidates side by side. A retry rebuilds the filter (with a new
    salt) and goes on with what is left. A dry run changes nothing and writes its report once.
    """
    check_batch_size(batch_size)
    if not 0 < false_positive_rate < 1:
        raise ValueError(f"false_positive_rate must be between 0 and 1, not {false_positive_rate}")
    if generation > collectable:
        raise GenerationError(f"generation {generation} is too recent to collect: this run may collect "
                              f"generations up to {collectable} (current - {GENERATION_LAG})")
    result = CollectResult(generation)
    key = {"dag_id": run.dag_id, "run_id": run.run_id, "generation": generation}
    with collecting_generation(conn, generation):
        if not run.dry_run:
            current = conn.execute(queries.load("generations/select_current_generation")).fetchone()[0]
            if current is None or generation > current - GENERATION_LAG:
                raise GenerationError(f"generation {generation} is too recent to collect: the current generation "
                                      f"is {current}")
        refs = build_reference_filter(conn, generation, false_positive_rate, salt=salt, page_size=scan_page,
                                      on_page=on_scan_page)
        result.references_scanned, result.filter_bytes = refs.references, refs.size_bytes
        log.info("generation %d: %d live references in a %d-byte filter (capacity %d, p=%g)", generation,
                 refs.references, refs.size_bytes, refs.capacity, false_positive_rate)
        if not run.dry_run:
            with conn.transaction():
                conn.execute(queries.load("generations/upsert_collection"),
                             {**key, "false_positive_rate": false_positive_rate, "filter_bytes": refs.size_bytes,
                              "references_scanned": refs.references})
        ranges = split_candidates(conn, generation, workers if connect is not None else 1)
        if len(ranges) == 1:
            parts = [walk_candidates(conn, run, refs, key, ranges[0], bucket, batch_size)]
        else:

            def walk_on_own_connection(bounds: tuple[str, str | None]) -> CollectResult:
                with connect() as own:
                    return walk_candidates(own, run, refs, key, bounds, bucket, batch_size)

            with ThreadPoolExecutor(len(ranges)) as pool:
                parts = list(pool.map(walk_on_own_connection, ranges))
        for part in parts:
            for name in ("candidates", "blobs_kept", "blobs_deleted", "bytes_reclaimed", "deletions_cleared"):
                setattr(result, name, getattr(result, name) + getattr(part, name))
            result.keys += part.keys
            result.sizes += part.sizes
        if run.dry_run:
            write_dry_run_report(conn, run, result, key, false_positive_rate, bucket, batch_size)
        else:
            with conn.transaction():
                conn.execute(queries.load("generations/finish_collection"), {**key, "kept": result.blobs_kept})
    log.info("generation %d: %d blobs with deletions; %d deleted (%d bytes), %d deletions cleared, %d kept "
             "(referenced, or a false positive left for a later run)%s", generation, result.candidates,
             result.blobs_deleted, result.bytes_reclaimed, result.deletions_cleared, result.blobs_kept,
             " [dry run: nothing changed]" if run.dry_run else "")
    return result


def split_candidates(conn: psycopg.Connection, generation: int, parts: int) -> list[tuple[str, str | None]]:
    """About `parts` ranges [lo, hi) of the generation's blob ids with deletions, of similar size."""
    if parts <= 1:
        return [("", None)]
    (n,) = conn.execute(queries.load("generations/count_deletions"), {"generation": generation}).fetchone()
    cuts = []
    for k in range(1, parts):
        row = conn.execute(queries.load("generations/select_deleted_blob_id_at"),
                           {"generation": generation, "offset": n * k // parts}).fetchone()
        if row and (not cuts or row[0] > cuts[-1]):
            cuts.append(row[0])
    edges = ["", *cuts]
    return list(zip(edges, [*cuts, None], strict=True))


def walk_candidates(conn: psycopg.Connection, run: RunRef, refs: ReferenceFilter, key: dict,
                    bounds: tuple[str, str | None], bucket: str, batch_size: int) -> CollectResult:
    """Walk the blobs with deletions in [lo, hi) in batches: those not in the filter are collected."""
    result = CollectResult(key["generation"])
    after, hi = bounds
    first = True
    while True:
        page = [r[0] for r in conn.execute(queries.load("generations/select_deleted_blob_ids"), {
            "generation": result.generation, "after": after, "inclusive": first, "hi": hi, "limit": batch_size})]
        if not page:
            return result
        first, after = False, page[-1]
        unreferenced = [b for b in page if b not in refs]
        result.candidates += len(page)
        result.blobs_kept += len(page) - len(unreferenced)
        if unreferenced:
            collect_batch(conn, run, result, key, unreferenced, bucket)


def collect_batch(conn: psycopg.Connection, run: RunRef, result: CollectResult, key: dict, blob_ids: list[str],
                  bucket: str) -> None:
    """Delete (or, on a dry run, find) one batch of unreferenced blobs, with their deletions and objects."""
    params = {"blob_ids": blob_ids, "generation": result.generation}
    if run.dry_run:
        ids, sizes, cleared = conn.execute(queries.load("generations/select_unreferenced_blobs"), params).fetchone()
        n_bytes = sum(s or 0 for s in sizes)
        result.keys += [mail_key(b) for b in ids]
        result.sizes += sizes
    else:
        with conn.transaction():
            ids, sizes, cleared = conn.execute(queries.load("generations/delete_unreferenced_blobs"),
                                               params).fetchone()
            n_bytes = sum(s or 0 for s in sizes)
            record_deletions(conn, run, source=SOURCE, bucket=bucket, keys=[mail_key(b) for b in ids], sizes=sizes)
            add_counts(conn, run, rows=len(ids))
            conn.execute(queries.load("generations/add_collection_counts"),
                         {**key, "blobs": len(ids), "bytes": n_bytes, "deletions": cleared})
    result.blobs_deleted += len(ids)
    result.bytes_reclaimed += n_bytes
    result.deletions_cleared += cleared


def write_dry_run_report(conn: psycopg.Connection, run: RunRef, result: CollectResult, key: dict,
                         false_positive_rate: float, bucket: str, batch_size: int) -> None:
    """A dry run's report of one generation, in one transaction and only once per run (a retry writes nothing)."""
    with conn.transaction():
        first = conn.execute(queries.load("generations/insert_dry_run_collection"), {
            **key, "false_positive_rate": false_positive_rate, "filter_bytes": result.filter_bytes,
            "references_scanned": result.references_scanned, "blobs": result.blobs_deleted,
            "bytes": result.bytes_reclaimed, "deletions": result.deletions_cleared, "kept": result.blobs_kept,
        }).fetchone()
        if first is None:
            log.info("this dry run already reported generation %d", result.generation)
            return
        record_in_batches(conn, run, source=SOURCE, bucket=bucket, keys=result.keys, sizes=result.sizes,
                          batch_size=batch_size)
        add_counts(conn, run, rows=result.blobs_deleted, objects=result.blobs_deleted, bytes_=result.bytes_reclaimed)


def summarize(conn: psycopg.Connection, run: RunRef) -> dict:
    """The run's collections, per generation and in total, for its report."""
    rows = conn.execute(queries.load("generations/summarize_collections"),
                        {"dag_id": run.dag_id, "run_id": run.run_id}).fetchall()
    per_generation = [
        {"generation": g, "dry_run": dry, "references_scanned": scanned, "filter_bytes": fbytes,
         "blobs_deleted": blobs, "bytes_reclaimed": n_bytes, "deletions_cleared": cleared, "blobs_kept": kept,
         "attempts": attempts, "finished": finished}
        for g, dry, scanned, fbytes, blobs, n_bytes, cleared, kept, attempts, finished in rows
    ]
    totals = {k: sum(p[k] or 0 for p in per_generation)
              for k in ("blobs_deleted", "bytes_reclaimed", "deletions_cleared", "blobs_kept")}
    return {"generations": per_generation, **totals}
