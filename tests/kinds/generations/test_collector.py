"""blobgc.kinds.generations.collector: seed 003's generation-based GC with a bloom filter (Apache James ADR 39)."""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from blobgc.kinds.generations.collector import GenerationError, OpenedGeneration, ReferenceFilter, eligible_generations, execute_plan_part, open_generation, plan_generation, plan_part
from tests.support.gated import collect_generation, collect_generations
from blobgc.core.clients import pg_connect
from blobgc.kinds.generations.layouts import mail_blob_id as blob_id_for
from blobgc.core.locks import GENERATION_LOCK_CLASS, hold_generation_shared
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.plans import PlanRefused, execution_report, fix_plan
from blobgc.core.runs import RunRef, finish_run
from blobgc.core.gate import let_through
from demo_app.mail import BlobGone, add_reference, delete_reference, lock_current_generation, store_blob
from tests.helpers import backend_waiting_on_lock, wait_until
from tests.support.generations import blobs, mail_keys, old_generation_with, run_ref


def ids(n: int, tag: str) -> list[str]:
    return [blob_id_for(hashlib.sha256(f"{tag}{i}".encode()).hexdigest(), 1) for i in range(n)]


# The scenario's expectations must not hang on a 1% false positive: there, the filter is asked for
# one in a billion (a bloom filter never has false negatives, so referenced blobs are safe at any rate).
EXACT = 1e-9


def iteration(conn, s3, bucket: str, run: RunRef, opened: OpenedGeneration, fpr: float = EXACT, **kwargs) -> dict:
    """One run's collection and drain, as the DAG's collect, delete_planned_blobs and delete_owed_objects tasks do
    it (planning every generation first, then executing the plan; the gate is the DAG's)."""
    collected = collect_generations(conn, run, eligible_generations(conn, opened), approved_by="tests",
                                    collectable=opened.collectable,
                                    bucket=bucket, false_positive_rate=fpr, **kwargs)
    delete_owed_objects(conn, s3, run)
    return collected


def deletions(conn) -> list[tuple[str, int, int]]:
    return sorted(conn.execute("SELECT blob_id, generation, gc_iteration FROM gen.deletion").fetchall())


def test_filter_has_no_false_negatives_and_meets_its_memory_goal():
    members = ids(100_000, "member")
    refs = ReferenceFilter.empty(len(members), 0.01)
    refs.add(members)
    assert all(b in refs for b in members)
    assert refs.references == len(members)
    assert refs.size_bytes / (len(members) / 1e6) <= 1.5e6  # at most 1.5 MB per million at 1%
    strangers = ids(100_000, "stranger")
    rate = sum(b in refs for b in strangers) / len(strangers)
    assert rate < 0.015


def test_salts_give_independent_false_positives():
    members, strangers = ids(2_000, "member"), ids(20_000, "stranger")

    def false_positives(salt: str) -> set[str]:
        refs = ReferenceFilter.empty(len(members), 0.1, salt)
        refs.add(members)
        return {b for b in strangers if b in refs}

    first, again, other = false_positives("run A:"), false_positives("run A:"), false_positives("run B:")
    assert first == again  # one salt, one filter: the same garbage would be protected every time
    assert first and other
    assert len(first & other) < len(first) * 0.3  # another salt keeps mostly other blobs (about 10% overlap)


def test_a_filter_refuses_an_impossible_rate():
    with pytest.raises(ValueError):
        ReferenceFilter.empty(10, 1.5)


def test_seed_scenario_generation_by_generation_under_the_n_minus_2_rule(conn, s3, bucket):
    """Seed 003's worked example (emails m1-m9, blobs b1-b6), each iteration opening a generation and
    collecting at its end. The seed's own walk-through collects b5 (generation 3) in iteration 3; its
    Decision only allows generations <= n-2, so here b5 and b6 go two iterations after their
    generation, in iteration 5."""
    name: dict[str, str] = {}

    def mail(message: str, blob: str) -> None:
        stored = store_blob(conn, s3, bucket=bucket, owner_id=message, content=f"content of {blob}".encode())
        assert name.setdefault(blob, stored.blob_id) == stored.blob_id  # one blob per content and generation

    def state() -> tuple[set[str], list[tuple[str, int, int]]]:
        ids = {v: k for k, v in name.items()}
        return {ids[b] for b in blobs(conn)}, sorted((ids[b], g, i) for b, g, i in deletions(conn))

    # Iteration 1: rg1. m1 -> b1; m2 and m3 share b2 (stored once). Nothing is old enough to collect.
    run1 = run_ref(conn, "gci1")
    opened = open_generation(conn, run1)
    assert opened.generation == 1
    mail("m1", "b1")
    mail("m2", "b2")
    mail("m3", "b2")
    assert iteration(conn, s3, bucket, run1, opened) == {}
    assert state() == ({"b1", "b2"}, [])

    # Iteration 2: rg2. m4 -> b3; m5 and m6 share b4. Still nothing at or below generation 0.
    run2 = run_ref(conn, "gci2")
    opened = open_generation(conn, run2)
    mail("m4", "b3")
    mail("m5", "b4")
    mail("m6", "b4")
    assert iteration(conn, s3, bucket, run2, opened) == {}

    # Iteration 3: rg3. m7 -> b5; m8 and m9 share b6. user1 deletes m1, m2, m7, m8; user2 deletes m3.
    run3 = run_ref(conn, "gci3")
    opened = open_generation(conn, run3)
    assert opened.generation == 3
    mail("m7", "b5")
    mail("m8", "b6")
    mail("m9", "b6")
    for message, blob in (("m1", "b1"), ("m2", "b2"), ("m7", "b5"), ("m8", "b6"), ("m3", "b2")):
        assert delete_reference(conn, owner_id=message, blob_id=name[blob])
    # the trigger recorded each deletion with its generation and the current iteration (3)
    assert state()[1] == sorted([("b1", 1, 3), ("b2", 1, 3), ("b2", 1, 3), ("b5", 3, 3), ("b6", 3, 3)])
    collected = iteration(conn, s3, bucket, run3, opened)
    # Only generation 1 (= 3 - 2) is collected: b1 and b2 have no reference left and go with their
    # three deletions. Generation 3's deletions (b5 unreferenced, b6 still referenced by m9) wait.
    assert set(collected) == {1}
    assert (collected[1].blobs_deleted, collected[1].deletions_cleared, collected[1].blobs_kept) == (2, 3, 0)
    assert state() == ({"b3", "b4", "b5", "b6"}, [("b5", 3, 3), ("b6", 3, 3)])
    assert mail_keys(s3, bucket) == {f"mail/{name[b]}" for b in ("b3", "b4", "b5", "b6")}

    # Iteration 4: rg4. user2 deletes m9, the last reference to b6. Generation 2 (= 4 - 2) has no
    # deletions, so nothing is collected; generation 3 is still too recent.
    run4 = run_ref(conn, "gci4")
    opened = open_generation(conn, run4)
    assert delete_reference(conn, owner_id="m9", blob_id=name["b6"])
    assert iteration(conn, s3, bucket, run4, opened) == {}
    assert state() == ({"b3", "b4", "b5", "b6"}, [("b5", 3, 3), ("b6", 3, 3), ("b6", 3, 4)])

    # Iteration 5: rg5. Generation 3 is now n-2: neither b5 nor b6 has a reference; both go, with
    # every deletion. What is left is the seed's final state: b3 and b4, referenced by m4, m5, m6.
    run5 = run_ref(conn, "gci5")
    opened = open_generation(conn, run5)
    collected = iteration(conn, s3, bucket, run5, opened)
    assert set(collected) == {3}
    assert (collected[3].blobs_deleted, collected[3].deletions_cleared, collected[3].blobs_kept) == (2, 3, 0)
    assert state() == ({"b3", "b4"}, [])
    assert mail_keys(s3, bucket) == {f"mail/{name['b3']}", f"mail/{name['b4']}"}
    assert sorted(conn.execute("SELECT owner_id FROM gen.reference").fetchall()) == [("m4",), ("m5",), ("m6",)]
    reclaimed = conn.execute("SELECT run_id, rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.run "
                             "WHERE rows_deleted > 0 ORDER BY run_id").fetchall()
    size = len(b"content of b1")
    assert reclaimed == [("gci3", 2, 2, 2 * size), ("gci5", 2, 2, 2 * size)]


def test_equal_content_in_two_generations_gives_two_blobs(conn, s3, bucket):
    open_generation(conn, run_ref(conn, "r1"))
    first = store_blob(conn, s3, bucket=bucket, owner_id="m1", content=b"same bytes")
    again = store_blob(conn, s3, bucket=bucket, owner_id="m2", content=b"same bytes")
    assert (first.created, again.created) == (True, False)
    assert again.blob_id == first.blob_id  # deduplicated within generation 1

    open_generation(conn, run_ref(conn, "r2"))
    later = store_blob(conn, s3, bucket=bucket, owner_id="m3", content=b"same bytes")
    assert later.created and later.generation == 2
    assert later.blob_id != first.blob_id
    assert blobs(conn) == {first.blob_id: 1, later.blob_id: 2}
    assert mail_keys(s3, bucket) == {f"mail/{first.blob_id}", f"mail/{later.blob_id}"}
    for blob_id in (first.blob_id, later.blob_id):
        assert s3.get_object(Bucket=bucket, Key=f"mail/{blob_id}")["Body"].read() == b"same bytes"
    assert conn.execute("SELECT count(*) FROM gen.reference").fetchone()[0] == 3


def test_a_salted_false_positive_is_collected_by_a_later_run(conn, s3, bucket):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=64, garbage=64)
    opened = OpenedGeneration(3, opened=False)

    def collect(salt: str) -> set[str]:  # each attempt is a run of its own (a run plans once)
        collect_generation(conn, run_ref(conn, f"fp {salt}"), approved_by="tests",
                           generation=1, collectable=opened.collectable,
                           bucket=bucket, false_positive_rate=0.3, salt=salt)
        return set(blobs(conn))

    # At a 30% false-positive rate, some of the 64 unreferenced blobs pass for referenced (all 64
    # would be collected with probability 0.7^64, about 1e-10). They keep their deletions.
    left = collect("first run:")
    survivors = left - referenced
    assert referenced <= left and survivors, "no false positive at p=0.3 (about 1e-10)"
    assert {b for b, _, _ in deletions(conn)} == survivors
    # Later runs salt differently, so their false positives are different blobs: each survivor
    # outlives a run with probability 0.3, and every one of them is gone within a few runs.
    for attempt in range(30):
        left = collect(f"run {attempt}:")
        assert referenced <= left  # a bloom filter has no false negatives
        if left == referenced:
            break
    assert left == referenced
    assert deletions(conn) == []
    delete_owed_objects(conn, s3, run_ref(conn, "fp drain"))  # drains what every run of the DAG owes
    assert mail_keys(s3, bucket) == {f"mail/{b}" for b in referenced}


def test_a_failed_reference_scan_deletes_nothing(conn, other_conn, s3, bucket, test_dsn):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=300, garbage=20)
    run = run_ref(conn, "scan-fails")
    before = (blobs(conn), deletions(conn), mail_keys(s3, bucket))
    pid = conn.info.backend_pid

    def connection_lost_after_first_page(scanned: int) -> None:
        # the server ends the collector's session mid-scan, as a failover or an admin would
        other_conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

    with pytest.raises(psycopg.OperationalError):
        collect_generation(conn, run, approved_by="tests", generation=1, collectable=1, bucket=bucket, scan_page=100,
                           on_scan_page=connection_lost_after_first_page)
    assert (blobs(other_conn), deletions(other_conn), mail_keys(s3, bucket)) == before
    assert other_conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0
    assert other_conn.execute("SELECT count(*) FROM blobgc.deletion_log").fetchone()[0] == 0

    # the task's retry, on a new connection, completes the collection
    with pg_connect(test_dsn) as retry:
        result = collect_generation(retry, run, approved_by="tests",
                                    generation=1, collectable=1, bucket=bucket, false_positive_rate=EXACT)
        assert (result.references_scanned, result.blobs_deleted, result.blobs_kept) == (300, 20, 0)
        delete_owed_objects(retry, s3, run)
    assert set(blobs(other_conn)) == referenced
    assert mail_keys(s3, bucket) == {f"mail/{b}" for b in referenced}


def test_collecting_on_two_connections_deletes_exactly_the_unreferenced(conn, s3, bucket, test_dsn):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=40, garbage=60)
    run = run_ref(conn, "two")
    result = collect_generation(conn, run, approved_by="tests",
                                generation=1, collectable=1, bucket=bucket, false_positive_rate=EXACT,
                                batch_size=7, workers=2, connect=lambda: pg_connect(test_dsn))
    assert (result.candidates, result.blobs_deleted, result.deletions_cleared, result.blobs_kept) == (60, 60, 60, 0)
    assert set(blobs(conn)) == referenced and deletions(conn) == []
    assert conn.execute("SELECT blobs_deleted, deletions_cleared FROM blobgc.generation_collection"
                        ).fetchone() == (60, 60)
    delete_owed_objects(conn, s3, run)
    assert mail_keys(s3, bucket) == {f"mail/{b}" for b in referenced}


def test_retrying_open_generation_does_not_open_two(conn, test_dsn):
    run = run_ref(conn, "scheduled__2026-11-21")
    first = open_generation(conn, run)
    assert (first.generation, first.opened) == (1, True)
    assert open_generation(conn, run) == OpenedGeneration(1, opened=False)

    # two attempts of one run at once (a zombie and its retry): still one generation
    retry = run_ref(conn, "scheduled__2026-11-22")

    def attempt(_: int) -> int:
        with pg_connect(test_dsn) as own:
            return open_generation(own, retry).generation

    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(attempt, range(4))) == {2}
    assert [r[0] for r in conn.execute("SELECT id FROM gen.generation ORDER BY id")] == [1, 2]

    # a dry run opens nothing and reports the generation a real run would open
    dry = open_generation(conn, run_ref(conn, "manual__dry", dry_run=True))
    assert (dry.generation, dry.opened, dry.collectable) == (3, False, 1)
    assert conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 2


def test_a_generation_newer_than_n_minus_2_is_never_collected(conn, s3, bucket):
    open_generation(conn, run_ref(conn, "r1"))
    stored = store_blob(conn, s3, bucket=bucket, owner_id="m1", content=b"young")
    delete_reference(conn, owner_id="m1", blob_id=stored.blob_id)
    opened = open_generation(conn, run_ref(conn, "r2"))
    assert eligible_generations(conn, opened) == []
    with pytest.raises(GenerationError, match="too recent"):
        collect_generation(conn, run_ref(conn, "r2"), approved_by="tests",
                           generation=1, collectable=opened.collectable, bucket=bucket)
    # a caller claiming a wider range is refused by the database's current generation too
    with pytest.raises(GenerationError, match="too recent"):
        collect_generation(conn, run_ref(conn, "r2"), approved_by="tests", generation=1, collectable=5, bucket=bucket)
    assert blobs(conn) == {stored.blob_id: 1}


def test_a_writer_that_read_an_old_generation_is_waited_for(conn, other_conn, s3, bucket, test_dsn):
    """A writer that took generation 1 as current and is still in its transaction when generations
    2 and 3 open: the collector waits for it, and the blob it reused is kept."""
    open_generation(conn, run_ref(conn, "r1"))
    shared = store_blob(conn, s3, bucket=bucket, owner_id="m1", content=b"shared")
    delete_reference(conn, owner_id="m1", blob_id=shared.blob_id)  # a pending deletion of the blob
    run = run_ref(conn, "r3")

    def collect() -> object:
        with pg_connect(test_dsn) as own:
            return collect_generation(own, run, approved_by="tests",
                                      generation=1, collectable=opened.collectable, bucket=bucket,
                                      false_positive_rate=EXACT)

    pool = ThreadPoolExecutor(1)
    with other_conn.transaction():
        assert lock_current_generation(other_conn) == 1  # the slow writer, mid-transaction
        open_generation(conn, run_ref(conn, "r2"))
        opened = open_generation(conn, run)
        collecting = pool.submit(collect)
        wait_until(lambda: backend_waiting_on_lock(conn, "pg_advisory_lock"))
        # the writer reuses the generation-1 blob it found, then commits
        other_conn.execute("INSERT INTO gen.reference (owner_id, blob_id, generation) VALUES ('m2', %s, 1)",
                           (shared.blob_id,))
    result = collecting.result(timeout=30)
    pool.shutdown()
    assert (result.blobs_deleted, result.blobs_kept) == (0, 1)
    assert blobs(conn) == {shared.blob_id: 1}


def test_a_writer_arriving_during_collection_moves_to_the_current_generation(conn, other_conn, s3, bucket):
    for n in (1, 2, 3):
        open_generation(conn, run_ref(conn, f"r{n}"))
    conn.execute("SELECT pg_advisory_lock(%s, 1)", (GENERATION_LOCK_CLASS,))  # a collector holding generation 1
    try:
        assert lock_current_generation(other_conn) == 3  # no wait: generation 1 is not current
        stored = store_blob(other_conn, s3, bucket=bucket, owner_id="m1", content=b"new mail")
        assert stored.generation == 3
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, 1)", (GENERATION_LOCK_CLASS,))


def test_adding_a_reference_to_a_blob_being_collected(conn, other_conn, s3, bucket, test_dsn):
    """A copied mail referencing an old blob either lands before the execution's exact re-check (the blob is
    kept, skipped from the plan) or finds the blob gone (and must store the content again) - never a reference
    to nothing. A copy made during the planning waits for the scan, then lands; the execution sees it."""
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=1, garbage=4)
    early, during, racing, doomed = sorted(garbage)
    assert add_reference(other_conn, owner_id="copy-of-early", blob_id=early) == 1  # before the plan
    run = run_ref(conn, "r")
    fix_plan(conn, run, None, 24)
    started = threading.Event()

    def plan() -> object:
        with pg_connect(test_dsn) as own:
            return plan_generation(own, run, generation=1, collectable=1, bucket=bucket, false_positive_rate=EXACT,
                                   on_scan_page=lambda _: started.set())

    with ThreadPoolExecutor(1) as pool:
        planning = pool.submit(plan)
        assert started.wait(10)
        # during the planning the copy waits for the generation, then lands on a blob the plan holds
        assert add_reference(other_conn, owner_id="copy-of-during", blob_id=during) == 1
        planned = planning.result(timeout=30)
    assert (planned.blobs_planned, planned.blobs_kept) == (3, 1)

    let_through(conn, run, approved_by="tests")

    def execute() -> object:
        with pg_connect(test_dsn) as own:
            return execute_plan_part(own, run, part=plan_part(1))

    pool = ThreadPoolExecutor(1)
    with other_conn.transaction():  # a writer adding a reference to `racing`, still in its transaction
        hold_generation_shared(other_conn, 1)
        other_conn.execute("INSERT INTO gen.reference (owner_id, blob_id, generation) VALUES ('copy-of-racing', %s, 1)",
                           (racing,))
        executing = pool.submit(execute)
        wait_until(lambda: backend_waiting_on_lock(conn, "pg_advisory_xact_lock"))  # the execution waits for it
    result = executing.result(timeout=30)
    pool.shutdown()
    assert (result.blobs_deleted, result.skipped_rereferenced) == (1, 2)
    # after the execution, a copy of the deleted blob finds it gone
    with pytest.raises(BlobGone):
        add_reference(other_conn, owner_id="copy-of-doomed", blob_id=doomed)
    assert set(blobs(conn)) == referenced | {early, during, racing}
    assert conn.execute("SELECT count(*) FROM gen.reference WHERE blob_id = %s", (doomed,)).fetchone()[0] == 0
    assert conn.execute("SELECT skipped_ids, skipped_keys FROM blobgc.plan_outcome WHERE run_id = 'r'").fetchone() == (
        sorted([during, racing]), sorted([f"mail/{during}", f"mail/{racing}"]))
    # the blobs kept (by the filter, or skipped) keep their deletions, for a later run
    assert {b for b, _, _ in deletions(conn)} == {early, during, racing}
    delete_owed_objects(conn, s3, run)
    assert mail_keys(s3, bucket) == {f"mail/{b}" for b in referenced | {early, during, racing}}


def finished_dry_run(conn, s3, bucket: str, run_id: str = "dry", **planning) -> RunRef:
    """A dry run that planned generation 1, finished (as its report task finishes it)."""
    dry = run_ref(conn, run_id, dry_run=True)
    fix_plan(conn, dry, None, 24)
    opened = open_generation(conn, dry)
    for generation in eligible_generations(conn, opened):
        plan_generation(conn, dry, generation=generation, collectable=opened.collectable, bucket=bucket,
                        false_positive_rate=EXACT, **planning)
    finish_run(conn, dry)
    return dry


def planned_items(conn, run_id: str) -> list[tuple]:
    return conn.execute("SELECT part, collection, source, row_ids, keys, sizes, bytes FROM blobgc.plan_item "
                        "WHERE run_id = %s ORDER BY id", (run_id,)).fetchall()


def test_a_dry_runs_plan_executed_deletes_exactly_the_plan_and_skips_what_was_referenced_again(conn, s3, bucket):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=3, garbage=6)
    dry = finished_dry_run(conn, s3, bucket, batch_size=4)
    items = planned_items(conn, "dry")
    assert [i[:3] for i in items] == [("generation 1", None, "gen.blob")] * 2  # 6 blobs in batches of 4
    assert sorted(b for i in items for b in i[3]) == sorted(garbage)
    assert sorted(k for i in items for k in i[4]) == sorted(f"mail/{b}" for b in garbage)
    sizes = dict(conn.execute("SELECT blob_id, size_bytes FROM gen.blob").fetchall())
    assert sum(i[6] for i in items) == sum(sizes[b] for b in garbage)
    before = (blobs(conn), deletions(conn), mail_keys(s3, bucket))
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0

    # After the plan: a planned blob is referenced again (a copied mail), and a referenced blob becomes garbage.
    rereferenced = sorted(garbage)[0]
    add_reference(conn, owner_id="copy", blob_id=rereferenced)
    newcomer = sorted(referenced)[0]
    live = conn.execute("SELECT owner_id FROM gen.reference WHERE blob_id = %s", (newcomer,)).fetchone()[0]
    delete_reference(conn, owner_id=live, blob_id=newcomer)
    assert before[0] == blobs(conn)

    real = run_ref(conn, "real")
    assert fix_plan(conn, real, "dry", 24) == "dry"
    opened = open_generation(conn, real, plans=False)
    assert (opened.generation, opened.opened, eligible_generations(conn, opened)) == (4, True, [])  # plans nothing
    let_through(conn, real, approved_by="tests")
    for _ in range(2):  # a retried delete task deals with each item once
        result = execute_plan_part(conn, real, part=plan_part(1))
    delete_owed_objects(conn, s3, real)
    assert set(blobs(conn)) == referenced | {rereferenced}  # the newcomer is not the plan's to delete
    assert mail_keys(s3, bucket) == {f"mail/{b}" for b in referenced | {rereferenced}}
    owed = conn.execute("SELECT array_agg(k ORDER BY k) FROM blobgc.deletion_log, unnest(keys) k "
                        "WHERE run_id = 'real'").fetchone()[0]
    assert owed == sorted(f"mail/{b}" for b in garbage - {rereferenced})
    assert conn.execute("SELECT skipped_ids, skipped_keys FROM blobgc.plan_outcome WHERE run_id = 'real' "
                        "AND skipped_ids <> '{}'").fetchall() == [([rereferenced], [f"mail/{rereferenced}"])]
    # the re-referenced blob keeps its deletion, and so does the newcomer, for a later run
    assert {b for b, _, _ in deletions(conn)} == {rereferenced, newcomer}

    report = execution_report(conn, real)
    assert {k: report[k] for k in ("plan", "planned_rows", "planned_objects", "planned_bytes", "items_done",
                                   "skipped_rereferenced_rows", "skipped_rereferenced_objects", "failed_objects")} == {
        "plan": "dry", "planned_rows": 6, "planned_objects": 6, "planned_bytes": sum(sizes[b] for b in garbage),
        "items_done": 2, "skipped_rereferenced_rows": 1, "skipped_rereferenced_objects": 1, "failed_objects": 0}
    assert (result.items, result.blobs_deleted, result.skipped_rereferenced) == (0, 0, 0)  # the retry: all done
    figures = conn.execute("SELECT run_id, dry_run, blobs_deleted, deletions_cleared, blobs_kept, "
                           "finished_at IS NOT NULL FROM blobgc.generation_collection ORDER BY run_id").fetchall()
    assert figures == [("dry", True, 6, 6, 0, True), ("real", False, 5, 5, 1, True)]
    assert conn.execute("SELECT dry_run, rows_deleted, objects_deleted FROM blobgc.run WHERE run_id = 'real'"
                        ).fetchone() == (False, 5, 5)
    with pytest.raises(PlanRefused, match="already executed"):  # a plan is executed once
        fix_plan(conn, run_ref(conn, "again"), dry.run_id, 24)


def test_a_retried_planning_task_plans_its_generation_once(conn, s3, bucket):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=2, garbage=5)
    run = run_ref(conn, "real")
    fix_plan(conn, run, None, 24)
    for salt in ("attempt 1:", "attempt 2:"):
        planned = plan_generation(conn, run, generation=1, collectable=1, bucket=bucket, false_positive_rate=EXACT,
                                  batch_size=2, salt=salt)
        assert (planned.candidates, planned.blobs_planned, planned.blobs_kept) == (5, 5, 0)
    assert sorted(b for i in planned_items(conn, "real") for b in i[3]) == sorted(garbage)
    assert blobs(conn).keys() == referenced | garbage  # planning deletes nothing
    assert conn.execute("SELECT attempts, blobs_deleted, blobs_kept, finished_at FROM blobgc.generation_collection"
                        ).fetchone() == (2, 0, 0, None)
    let_through(conn, run, approved_by="tests")
    result = execute_plan_part(conn, run, part=plan_part(1))
    assert (result.items, result.blobs_deleted, result.deletions_cleared) == (3, 5, 5)
    with pytest.raises(PlanRefused, match="may not plan again: its gate judged the plan"):  # judged, it stays as it is
        plan_generation(conn, run, generation=1, collectable=1, bucket=bucket, false_positive_rate=EXACT)


def test_a_deletion_whose_blob_has_no_row_is_planned_and_cleared(conn, s3, bucket):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=1, garbage=1)
    ghost = ids(1, "ghost")[0]  # a deletion of generation 1 whose blob has no row (collected elsewhere)
    conn.execute("INSERT INTO gen.deletion (blob_id, generation, deleted_at, gc_iteration) VALUES (%s, 1, now(), 3)",
                 (ghost,))
    result = collect_generation(conn, run_ref(conn, "real"), approved_by="tests",
                                generation=1, collectable=1, bucket=bucket,
                                false_positive_rate=EXACT)
    assert (result.blobs_deleted, result.deletions_cleared, result.skipped_rereferenced) == (1, 2, 0)
    assert [(sorted(i[3]), i[4]) for i in planned_items(conn, "real")] == [(sorted([*garbage, ghost]),
                                                                   [f"mail/{b}" for b in garbage])]
    assert deletions(conn) == [] and set(blobs(conn)) == referenced


def test_dry_run_reports_and_changes_nothing(conn, s3, bucket):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=3, garbage=5)
    before = (blobs(conn), deletions(conn), mail_keys(s3, bucket))
    run = run_ref(conn, "dry", dry_run=True)
    opened = open_generation(conn, run)
    assert (opened.generation, opened.opened) == (4, False)
    for _ in range(2):  # a retried dry run writes its report once
        result = collect_generation(conn, run, approved_by="tests",
                                    generation=1, collectable=opened.collectable, bucket=bucket,
                                    false_positive_rate=EXACT)
        assert (result.blobs_deleted, result.deletions_cleared, result.blobs_kept) == (5, 5, 0)
    assert (blobs(conn), deletions(conn), mail_keys(s3, bucket)) == before
    assert conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 3
    logged = conn.execute("SELECT dry_run, array_agg(key ORDER BY key) FROM blobgc.deleted_object "
                          "GROUP BY dry_run").fetchall()
    assert logged == [(True, sorted(f"mail/{b}" for b in garbage))]
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0
    assert conn.execute("SELECT dry_run, rows_deleted, objects_deleted FROM blobgc.run WHERE run_id = 'dry'"
                        ).fetchone() == (True, 5, 5)
