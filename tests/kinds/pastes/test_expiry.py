"""blobgc.kinds.pastes.expiry: seed 002's batch expiry with ref_count, shared contents and concurrent runs."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest
from botocore.exceptions import EndpointConnectionError

from blobgc.kinds.pastes.expiry import ORPHANS_PART, ExpiryExecution, check_ref_counts, contents_part, execute_expiry_part, plan_expiry, restart_expiry_plan, split_expiry_contents
from tests.support.gated import expire_due_pastes
from blobgc.core.cache_purge import purge_owed_cache_keys
from blobgc.core.clients import pg_connect, s3_client_from_env
from blobgc.kinds.pastes.layouts import content_key
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.gate import GateSettings, judge, record_judgement
from blobgc.core.plans import PASSED, execution_report, fix_plan, plan_parts
from blobgc.core.runs import RunRef, ensure_run, finish_run
from demo_app.pastes import create_paste
from tests.helpers import NOW, cached_keys, object_keys
from tests.support.pastes import FUTURE, PAST, expire_all, new_run, ref_count


def insert_pastes(conn, rows: list[tuple[str, str, datetime]]) -> None:
    """Bulk pastes (short_code, content_hash, expires_at) with contents whose ref_count is their paste count."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO app.content (content_hash, ref_count, size_bytes) "
            "SELECT h, count(*), 10 FROM unnest(%(hashes)s::text[]) h GROUP BY h",
            {"hashes": [h for _, h, _ in rows]},
        )
        conn.execute(
            "INSERT INTO app.paste (short_code, content_hash, expires_at) "
            "SELECT * FROM unnest(%(codes)s::text[], %(hashes)s::text[], %(expires)s::timestamptz[])",
            {"codes": [c for c, _, _ in rows], "hashes": [h for _, h, _ in rows], "expires": [e for _, _, e in rows]},
        )


DAG = "blobgc_paste_expiry"


def plan_run(conn, name: str, *, dry: bool = False, from_plan: str | None = None) -> RunRef:
    """A run of the DAG with its plan fixed (its first task's job): its own, or the dry run `from_plan`."""
    run = ensure_run(conn, RunRef(DAG, name, dry), NOW)
    fix_plan(conn, run, from_plan, 24)
    return run


def plan(conn, name: str, bucket: str, *, dry: bool = False, windows: int = 1, batch_size: int = 1000) -> RunRef:
    """What a run that plans itself does before its gate: check_ref_counts, then plan_expiry per range."""
    run = plan_run(conn, name, dry=dry)
    check_ref_counts(conn, run, bucket=bucket, plan_orphans=True)
    for hashes in split_expiry_contents(conn, run.reference_time, windows):
        plan_expiry(conn, run, expired_before=run.reference_time, bucket=bucket, batch_size=batch_size,
                    content_range=hashes)
    return run


def execute(conn, run: RunRef, redis_prefix: str = "") -> ExpiryExecution:
    """The gate passes the plan, then expire_pastes executes each of its parts in turn."""
    record_judgement(conn, run, judge(conn, run, GateSettings()), PASSED)
    results = [execute_expiry_part(conn, run, part=p["part"], redis_prefix=redis_prefix)
               for p in plan_parts(conn, run)]
    return ExpiryExecution(**ExpiryExecution.total([r.to_xcom() for r in results]))


def plan_rows(conn, run_id: str) -> list[tuple[str, list[str], list[str]]]:
    return conn.execute("SELECT part, row_ids, keys FROM blobgc.plan_item WHERE run_id = %s ORDER BY id",
                        (run_id,)).fetchall()


def dry_logged(conn, run_id: str) -> set[str]:
    return {k for (k,) in conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s AND dry_run",
                                       (run_id,))}


def pastes_left(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT short_code FROM app.paste")}


def test_seed_002_example_shared_content_outlives_the_first_expiry(conn, s3, bucket, redis, redis_prefix):
    """Pastes A and B share content: A expires and the object stays (ref_count 1); B expires and it goes."""
    a = create_paste(conn, s3, redis, bucket=bucket, content=b"abc123", expires_at=PAST, redis_prefix=redis_prefix)
    b = create_paste(conn, s3, redis, bucket=bucket, content=b"abc123", expires_at=FUTURE, redis_prefix=redis_prefix)
    key = content_key(a.content_hash)

    expired, drained, _ = expire_all(conn, s3, redis, new_run(conn, "today"), bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, drained.objects_deleted) == (1, 0, 0)
    assert ref_count(conn, a.content_hash) == 1
    assert key in object_keys(s3, bucket)
    assert [r[0] for r in conn.execute("SELECT short_code FROM app.paste")] == [b.short_code]

    with conn.transaction():
        conn.execute("UPDATE app.paste SET expires_at = %s WHERE short_code = %s", (PAST, b.short_code))
    expired, drained, _ = expire_all(conn, s3, redis, new_run(conn, "next-month"), bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, drained.objects_deleted) == (1, 1, 1)
    assert ref_count(conn, a.content_hash) is None
    assert key not in object_keys(s3, bucket)
    assert cached_keys(redis, redis_prefix) == set()


def test_duplicates_inside_one_batch_decrement_by_their_count(conn, s3, bucket, redis, redis_prefix):
    pastes = [create_paste(conn, s3, redis, bucket=bucket, content=b"dup", expires_at=PAST, redis_prefix=redis_prefix)
              for _ in range(3)]
    survivor = create_paste(conn, s3, redis, bucket=bucket, content=b"dup", expires_at=FUTURE,
                            redis_prefix=redis_prefix)
    assert ref_count(conn, survivor.content_hash) == 4

    expired, _, _ = expire_all(conn, s3, redis, new_run(conn), bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.batches) == (3, 1)
    assert ref_count(conn, survivor.content_hash) == 1  # 4 - 3, not 4 - 1
    assert content_key(survivor.content_hash) in object_keys(s3, bucket)
    assert {p.short_code for p in pastes}.isdisjoint({r[0] for r in conn.execute("SELECT short_code FROM app.paste")})

    with conn.transaction():
        conn.execute("UPDATE app.paste SET expires_at = %s", (PAST,))
    more = [create_paste(conn, s3, redis, bucket=bucket, content=b"dup", expires_at=PAST, redis_prefix=redis_prefix)
            for _ in range(2)]
    expired, drained, _ = expire_all(conn, s3, redis, new_run(conn, "r2"), bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, expired.objects_owed) == (1 + len(more), 1, 1)
    assert drained.objects_deleted == 1
    assert object_keys(s3, bucket) == set()
    logged = conn.execute("SELECT keys FROM blobgc.deletion_log WHERE run_id = 'r2'").fetchall()
    assert logged == [([content_key(survivor.content_hash)],)]  # owed once, not once per paste


def test_batches_cross_1000_with_one_s3_call_and_one_redis_round_trip_each(conn, s3, bucket, redis, redis_prefix):
    n = 1001
    with ThreadPoolExecutor(4) as pool:
        def make(i: int):
            with pg_connect(os.environ["BLOBGC_PG_DSN"]) as own:
                return create_paste(own, s3, redis, bucket=bucket, content=f"paste {i}".encode(),
                                    expires_at=PAST, redis_prefix=redis_prefix)
        made = list(pool.map(make, range(n)))
    assert len(object_keys(s3, bucket)) == n and len(cached_keys(redis, redis_prefix)) == n

    counting = s3_client_from_env()
    calls: list[int] = []
    counting.meta.events.register("before-send.s3.DeleteObjects",  # the keys of each request as sent
                                  lambda request, **_: calls.append(request.body.count(b"<Object>")))
    run = new_run(conn)
    expired = expire_due_pastes(conn, run, approved_by="tests",
                                expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, expired.batches) == (n, n, 2)
    assert [len(codes) for _, codes, _ in plan_rows(conn, run.run_id)] == [1000, 1]  # a plan item per batch
    drained = delete_owed_objects(conn, counting, run)
    purged = purge_owed_cache_keys(conn, redis, run, rows_per_round_trip=1)
    assert drained.objects_deleted == n and sorted(calls) == [1, 1000]
    assert (purged.keys_purged, purged.keys_found, purged.round_trips) == (n, n, 2)
    assert object_keys(s3, bucket) == set()
    assert cached_keys(redis, redis_prefix) == set()
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == 0
    assert made


def test_s3_down_mid_run_then_a_retry_completes(conn, s3, bucket, redis, redis_prefix):
    for i in range(30):
        create_paste(conn, s3, redis, bucket=bucket, content=f"s3-down {i}".encode(), expires_at=PAST,
                     redis_prefix=redis_prefix)
    run = new_run(conn)
    expired = expire_due_pastes(conn, run, approved_by="tests",
                                expired_before=NOW, bucket=bucket, batch_size=5, redis_prefix=redis_prefix)
    assert expired.objects_owed == 30

    failing = s3_client_from_env()
    calls = {"n": 0}

    def go_down_after_two_calls(**_):
        calls["n"] += 1
        if calls["n"] > 2:
            raise EndpointConnectionError(endpoint_url=os.environ["BLOBGC_S3_ENDPOINT"])

    failing.meta.events.register("before-send.s3.DeleteObjects", go_down_after_two_calls)
    with pytest.raises(EndpointConnectionError):
        delete_owed_objects(conn, failing, run, batch_size=5, concurrency=1)
    assert len(object_keys(s3, bucket)) == 20  # two calls of 5 keys went through
    owed = conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE owed").fetchone()[0]
    assert owed == 20
    assert conn.execute("SELECT objects_deleted FROM blobgc.run").fetchone()[0] == 10

    retried = delete_owed_objects(conn, s3, run, batch_size=5)
    assert (retried.objects_deleted, retried.owed_after) == (20, 0)
    assert object_keys(s3, bucket) == set()
    assert conn.execute("SELECT objects_deleted FROM blobgc.run").fetchone()[0] == 30


def test_concurrent_expiry_runs_never_double_decrement(conn, test_dsn):
    """Four runs at once over shared contents, each planning and then executing its own plan: every paste counted
    once, every ref_count exact, every object owed once; the contents a run took to 0 outside its plan go with a
    later run's orphan plan."""
    rows = []
    for c in range(300):
        digest = f"content-{c:04d}"
        for p in range(4):
            expired = (c * 4 + p) % 7 < 4 or c % 10 == 0  # some contents lose every paste
            rows.append((f"s{c:04d}-{p}", digest, PAST if expired else FUTURE))
    insert_pastes(conn, rows)
    n_expired = sum(1 for r in rows if r[2] == PAST)
    doomed = {h for h in {r[1] for r in rows} if all(r[2] == PAST for r in rows if r[1] == h)}

    def one_run(i: int):
        with pg_connect(test_dsn) as own:
            return expire_due_pastes(own, RunRef(DAG, f"concurrent-{i}"), approved_by="tests",
                                     expired_before=NOW, bucket="unused-bucket",
                                     batch_size=50)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one_run, range(4)))
    assert sum(r.pastes_deleted for r in results) == n_expired
    drift = conn.execute(
        "SELECT count(*) FROM app.content c WHERE ref_count <> "
        "(SELECT count(*) FROM app.paste p WHERE p.content_hash = c.content_hash)").fetchone()[0]
    assert drift == 0
    logged = [k for (keys,) in conn.execute("SELECT keys FROM blobgc.deletion_log") for k in keys]
    assert len(logged) == len(set(logged)) == sum(r.contents_deleted for r in results)  # each owed once
    left = {h for (h,) in conn.execute("SELECT content_hash FROM app.content WHERE ref_count = 0")}
    assert left | {k.removeprefix("pastes/") for k in logged} == doomed
    assert sum(r.contents_left_at_zero for r in results) == len(left)

    later = plan_run(conn, "later")
    assert check_ref_counts(conn, later, bucket="unused-bucket", plan_orphans=True).orphans_planned == len(left)
    assert expire_due_pastes(conn, later, approved_by="tests",
                             expired_before=NOW, bucket="unused-bucket").contents_deleted == len(left)
    logged = [k for (keys,) in conn.execute("SELECT keys FROM blobgc.deletion_log") for k in keys]
    assert sorted(logged) == sorted(content_key(h) for h in doomed)  # each owed exactly once, in the end
    assert conn.execute("SELECT count(*) FROM app.content").fetchone()[0] == 300 - len(doomed)


def test_expiry_split_into_ranges_expires_every_due_paste_once(conn, test_dsn):
    """What the mapped plan_expiry and expire_pastes tasks do: disjoint ranges of content_hash, one connection
    each, to plan and then to execute."""
    rows = [(f"r{i:04d}", f"content-{i % 150:03d}", NOW - timedelta(minutes=i) if i % 3 else NOW + timedelta(days=1))
            for i in range(600)]
    insert_pastes(conn, rows)
    due = [r for r in rows if r[2] < NOW]
    ranges = split_expiry_contents(conn, NOW, 3)
    assert len(ranges) == 3 and ranges[0][0] is None and ranges[-1][1] is None
    opened: list[int] = []

    def connect():
        own = pg_connect(test_dsn)
        opened.append(own.info.backend_pid)
        return own

    run = RunRef(DAG, "split")
    expired = expire_due_pastes(conn, run, approved_by="tests",
                                expired_before=NOW, bucket="unused-bucket", batch_size=40, workers=3,
                                connect=connect)
    assert len(opened) == 6  # three ranges planned, then three parts executed, each on its own connection
    parts: dict[str, int] = {}
    for part, codes, _ in plan_rows(conn, "split"):
        parts[part] = parts.get(part, 0) + len(codes)
    assert sorted(parts) == sorted(contents_part(r) for r in ranges) and all(n > 0 for n in parts.values())
    assert expired.pastes_deleted == sum(parts.values()) == len(due)
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == len(rows) - len(due)
    drift = conn.execute(
        "SELECT count(*) FROM app.content c WHERE ref_count <> "
        "(SELECT count(*) FROM app.paste p WHERE p.content_hash = c.content_hash)").fetchone()[0]
    assert drift == 0


def test_a_second_run_over_the_same_pastes_finds_nothing_to_decrement(conn, s3, bucket, redis, redis_prefix):
    """A retried run, or another run, after the first committed: nothing is planned or decremented twice."""
    create_paste(conn, s3, redis, bucket=bucket, content=b"z", expires_at=PAST, redis_prefix=redis_prefix)
    keep = create_paste(conn, s3, redis, bucket=bucket, content=b"z", expires_at=FUTURE, redis_prefix=redis_prefix)
    run = new_run(conn)
    first = expire_due_pastes(conn, run, approved_by="tests",
                              expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    again = expire_due_pastes(conn, run, approved_by="tests",
                              expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    other = expire_due_pastes(conn, new_run(conn, "r2"), approved_by="tests",
                              expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    assert (first.pastes_deleted, again.pastes_deleted, again.batches, other.pastes_deleted) == (1, 0, 0, 0)
    assert ref_count(conn, keep.content_hash) == 1


def test_check_ref_counts_repairs_drift_and_plans_orphans_without_deleting_them(conn, s3, bucket, redis, redis_prefix):
    high = create_paste(conn, s3, redis, bucket=bucket, content=b"high", expires_at=FUTURE, redis_prefix=redis_prefix)
    low = create_paste(conn, s3, redis, bucket=bucket, content=b"low", expires_at=FUTURE, redis_prefix=redis_prefix)
    create_paste(conn, s3, redis, bucket=bucket, content=b"low", expires_at=FUTURE, redis_prefix=redis_prefix)
    fine = create_paste(conn, s3, redis, bucket=bucket, content=b"fine", expires_at=FUTURE, redis_prefix=redis_prefix)
    orphan = create_paste(conn, s3, redis, bucket=bucket, content=b"orphan", expires_at=FUTURE,
                          redis_prefix=redis_prefix)
    with conn.transaction():
        conn.execute("UPDATE app.content SET ref_count = 5 WHERE content_hash = %s", (high.content_hash,))
        conn.execute("UPDATE app.content SET ref_count = 1 WHERE content_hash = %s", (low.content_hash,))
        # a paste removed behind the collector's back: its content leaks unless the count is repaired
        conn.execute("DELETE FROM app.paste WHERE short_code = %s", (orphan.short_code,))

    dry = check_ref_counts(conn, plan_run(conn, "dry", dry=True), bucket=bucket, plan_orphans=True)
    assert (dry.drifted, dry.total_drift, dry.repaired, dry.orphans_planned) == (3, 4 + 1 + 1, 0, 1)
    assert ref_count(conn, high.content_hash) == 5  # a dry run repairs nothing
    assert dry_logged(conn, "dry") == {content_key(orphan.content_hash)}

    unplanned = check_ref_counts(conn, plan_run(conn, "no-plan"), bucket=bucket)  # repairs, plans and deletes nothing
    assert (unplanned.repaired, unplanned.orphans_planned) == (3, 0)
    assert (ref_count(conn, high.content_hash), ref_count(conn, low.content_hash)) == (1, 2)
    assert ref_count(conn, orphan.content_hash) == 0  # no paste left, but no plan: kept
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log WHERE NOT dry_run").fetchone()[0] == 0

    run = plan_run(conn, "real")
    report = check_ref_counts(conn, run, bucket=bucket, plan_orphans=True)
    assert (report.drifted, report.repaired, report.orphans_planned) == (0, 0, 1)  # repaired by no-plan
    assert ref_count(conn, orphan.content_hash) == 0  # planned, not deleted
    assert plan_rows(conn, "real") == [(ORPHANS_PART, [orphan.content_hash], [content_key(orphan.content_hash)])]
    check_ref_counts(conn, run, bucket=bucket, plan_orphans=True)  # a retry plans its orphans once
    assert len(plan_rows(conn, "real")) == 1
    executed = execute(conn, run)
    assert (executed.contents_deleted, executed.objects_owed) == (1, 1)
    assert ref_count(conn, fine.content_hash) == 1 and ref_count(conn, orphan.content_hash) is None
    delete_owed_objects(conn, s3, run)
    assert object_keys(s3, bucket) == {content_key(p.content_hash) for p in (high, low, fine)}
    assert check_ref_counts(conn, plan_run(conn, "after"), bucket=bucket).drifted == 0


def test_an_orphan_that_gained_a_paste_after_the_plan_is_kept(conn, s3, bucket, redis, redis_prefix):
    orphan = create_paste(conn, s3, redis, bucket=bucket, content=b"lonely", expires_at=FUTURE,
                          redis_prefix=redis_prefix)
    with conn.transaction():
        conn.execute("DELETE FROM app.paste WHERE short_code = %s", (orphan.short_code,))
        conn.execute("UPDATE app.content SET ref_count = 0")
    run = plan_run(conn, "orphan")
    assert check_ref_counts(conn, run, bucket=bucket, plan_orphans=True).orphans_planned == 1
    again = create_paste(conn, s3, redis, bucket=bucket, content=b"lonely", expires_at=FUTURE,
                         redis_prefix=redis_prefix)
    executed = execute(conn, run)
    assert (executed.contents_deleted, executed.skipped_objects) == (0, 1)
    assert ref_count(conn, again.content_hash) == 1
    assert content_key(again.content_hash) in object_keys(s3, bucket)
    assert conn.execute("SELECT skipped_ids, skipped_keys FROM blobgc.plan_outcome WHERE run_id = 'orphan'"
                        ).fetchone() == ([again.content_hash], [content_key(again.content_hash)])


def test_dry_run_reports_what_would_go_and_changes_nothing(conn, s3, bucket, redis, redis_prefix):
    for i in range(3):
        create_paste(conn, s3, redis, bucket=bucket, content=f"gone {i}".encode(), expires_at=PAST,
                     redis_prefix=redis_prefix)
    create_paste(conn, s3, redis, bucket=bucket, content=b"shared", expires_at=PAST, redis_prefix=redis_prefix)
    create_paste(conn, s3, redis, bucket=bucket, content=b"shared", expires_at=FUTURE, redis_prefix=redis_prefix)
    before = (object_keys(s3, bucket), cached_keys(redis, redis_prefix),
              conn.execute("SELECT * FROM app.content ORDER BY 1").fetchall())
    run = new_run(conn, "dry", dry_run=True)
    for _attempt in range(2):  # a retried dry run reports the same, once
        expired, drained, purged = expire_all(conn, s3, redis, run, bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, expired.objects_owed) == (4, 3, 3)
    assert expired.bytes_owed == sum(len(f"gone {i}") for i in range(3))
    assert (drained.objects_deleted, purged.keys_purged) == (0, 0)
    after = (object_keys(s3, bucket), cached_keys(redis, redis_prefix),
             conn.execute("SELECT * FROM app.content ORDER BY 1").fetchall())
    assert after == before
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == 5
    assert conn.execute("SELECT dry_run, rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.run").fetchone() \
        == (True, 7, 3, expired.bytes_owed)
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE dry_run").fetchone()[0] == 3
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0


def test_a_dry_runs_plan_executed_from_plan_expires_exactly_the_planned_pastes(conn, s3, bucket, redis, redis_prefix):
    """Planned pastes go; one extended since the plan is skipped and reported, its object kept; one that expired
    after the plan, and a content that gained a paste, are not touched."""
    def paste(content: bytes, expires_at):
        return create_paste(conn, s3, redis, bucket=bucket, content=content, expires_at=expires_at,
                            redis_prefix=redis_prefix)

    gone, extended, shared = paste(b"gone", PAST), paste(b"extended", PAST), paste(b"shared", PAST)
    later = paste(b"later", FUTURE)  # expires after the plan was made
    dry = plan(conn, "dry", bucket, dry=True)
    planned_keys = {content_key(p.content_hash) for p in (gone, extended, shared)}
    assert [(set(codes), set(keys)) for _, codes, keys in plan_rows(conn, "dry")] == [
        ({gone.short_code, extended.short_code, shared.short_code}, planned_keys)]
    assert dry_logged(conn, "dry") == planned_keys  # the dry run's report, as before plans
    counted = conn.execute("SELECT rows_deleted, objects_deleted FROM blobgc.run WHERE run_id = 'dry'").fetchone()
    assert counted == (6, 3)  # 3 pastes and 3 contents, 3 objects
    assert len(pastes_left(conn)) == 4 and len(object_keys(s3, bucket)) == 4  # a dry run changes nothing
    finish_run(conn, dry)

    with conn.transaction():
        conn.execute("UPDATE app.paste SET expires_at = %s WHERE short_code = %s", (FUTURE, extended.short_code))
        conn.execute("UPDATE app.paste SET expires_at = %s WHERE short_code = %s", (PAST, later.short_code))
    newcomer = paste(b"shared", FUTURE)  # the shared content gains a paste after the plan

    run = plan_run(conn, "real", from_plan="dry")
    assert check_ref_counts(conn, run, bucket=bucket, plan_orphans=False).orphans_planned == 0
    executed = execute(conn, run, redis_prefix)
    assert (executed.pastes_deleted, executed.contents_deleted, executed.objects_owed) == (2, 1, 1)
    assert (executed.skipped_pastes, executed.skipped_objects) == (1, 2)
    assert pastes_left(conn) == {extended.short_code, later.short_code, newcomer.short_code}
    assert ref_count(conn, shared.content_hash) == 1 and ref_count(conn, extended.content_hash) == 1
    delete_owed_objects(conn, s3, run)
    purge_owed_cache_keys(conn, redis, run)
    assert object_keys(s3, bucket) == {content_key(p.content_hash) for p in (extended, shared, later)}
    assert cached_keys(redis, redis_prefix) == {f"{redis_prefix}{p.short_code}"
                                                for p in (extended, later, newcomer)}
    outcome = conn.execute("SELECT skipped_ids, skipped_keys FROM blobgc.plan_outcome WHERE run_id = 'real'").fetchone()
    assert outcome[0] == [extended.short_code]
    assert set(outcome[1]) == {content_key(extended.content_hash), content_key(shared.content_hash)}
    report = execution_report(conn, run)
    assert (report["plan"], report["planned_rows"], report["planned_objects"]) == ("dry", 3, 3)
    assert (report["skipped_rereferenced_rows"], report["skipped_rereferenced_objects"]) == (1, 2)
    assert (report["items_done"], report["failed_objects"]) == (1, 0)
    assert execute(conn, run).items == 0  # a retry finds every item dealt with


def test_a_content_reaching_zero_outside_the_plan_is_kept_for_a_later_runs_orphan_plan(conn, s3, bucket, redis,
                                                                                        redis_prefix):
    first = create_paste(conn, s3, redis, bucket=bucket, content=b"half", expires_at=PAST, redis_prefix=redis_prefix)
    second = create_paste(conn, s3, redis, bucket=bucket, content=b"half", expires_at=FUTURE,
                          redis_prefix=redis_prefix)
    run = plan(conn, "r1", bucket)
    assert plan_rows(conn, "r1") == [(contents_part((None, None)), [first.short_code], [])]  # the content stays
    with conn.transaction():  # the application removes the other paste meanwhile, decrementing as it should
        conn.execute("DELETE FROM app.paste WHERE short_code = %s", (second.short_code,))
        conn.execute("UPDATE app.content SET ref_count = ref_count - 1")
    executed = execute(conn, run)
    assert (executed.pastes_deleted, executed.contents_deleted, executed.contents_left_at_zero) == (1, 0, 1)
    assert ref_count(conn, first.content_hash) == 0  # never deleted outside a plan
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log").fetchone()[0] == 0

    later = plan(conn, "r2", bucket)
    assert plan_rows(conn, "r2") == [(ORPHANS_PART, [first.content_hash], [content_key(first.content_hash)])]
    assert execute(conn, later).objects_owed == 1
    delete_owed_objects(conn, s3, later)
    assert ref_count(conn, first.content_hash) is None and object_keys(s3, bucket) == set()


def test_a_real_run_plans_itself_in_ranges_then_expires_every_due_paste(conn, s3, bucket, redis, redis_prefix):
    """Shared contents across batches, two ranges of content_hash: each object planned once, in the item of its
    last paste, and every paste of a content in one part."""
    made = [create_paste(conn, s3, redis, bucket=bucket, content=f"c{i % 4}".encode(),
                         expires_at=PAST - timedelta(minutes=i), redis_prefix=redis_prefix) for i in range(12)]
    alive = create_paste(conn, s3, redis, bucket=bucket, content=b"c3", expires_at=FUTURE, redis_prefix=redis_prefix)
    run = plan(conn, "real", bucket, windows=2, batch_size=3)
    items = plan_rows(conn, "real")
    assert len({part for part, _, _ in items}) == 2 and all(len(codes) <= 3 for _, codes, _ in items)
    assert sorted(c for _, codes, _ in items for c in codes) == sorted(p.short_code for p in made)
    keys = [k for _, _, ks in items for k in ks]
    assert sorted(keys) == sorted(content_key(made[i].content_hash) for i in range(3))  # c3 has a live paste
    first_range = split_expiry_contents(conn, run.reference_time, 2)[0]
    plan_expiry(conn, run, expired_before=run.reference_time, bucket=bucket, batch_size=3,
                content_range=first_range)  # a retried planning task plans its range once
    assert sorted(plan_rows(conn, "real")) == sorted(items)
    parts = {}
    for part, codes, _ in items:
        for code in codes:
            parts.setdefault(next(p.content_hash for p in made if p.short_code == code), set()).add(part)
    assert all(len(found) == 1 for found in parts.values())
    assert sorted(plan_rows(conn, "real")) == sorted(items)
    executed = execute(conn, run, redis_prefix)
    assert (executed.pastes_deleted, executed.contents_deleted, executed.skipped_pastes) == (12, 3, 0)
    delete_owed_objects(conn, s3, run)
    purge_owed_cache_keys(conn, redis, run)
    assert pastes_left(conn) == {alive.short_code} and ref_count(conn, alive.content_hash) == 1
    assert object_keys(s3, bucket) == {content_key(alive.content_hash)}
    assert cached_keys(redis, redis_prefix) == {f"{redis_prefix}{alive.short_code}"}


def test_two_runs_executing_overlapping_plans_at_once_never_double_decrement(conn, test_dsn):
    rows = []
    for c in range(200):
        for p in range(3):
            expired = (c * 3 + p) % 5 < 3 or c % 10 == 0
            rows.append((f"s{c:04d}-{p}", f"content-{c:04d}", PAST if expired else FUTURE))
    insert_pastes(conn, rows)
    n_expired = sum(1 for r in rows if r[2] == PAST)
    doomed = {h for h in {r[1] for r in rows} if all(r[2] == PAST for r in rows if r[1] == h)}
    runs = [plan(conn, f"overlap-{i}", "unused-bucket", batch_size=40) for i in range(2)]  # the same pastes twice

    def one_run(run: RunRef) -> ExpiryExecution:
        with pg_connect(test_dsn) as own:
            return execute(own, run)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one_run, runs))
    assert sum(r.pastes_deleted for r in results) == n_expired
    assert sum(r.pastes_deleted + r.skipped_pastes for r in results) == 2 * n_expired
    drift = conn.execute(
        "SELECT count(*) FROM app.content c WHERE ref_count <> "
        "(SELECT count(*) FROM app.paste p WHERE p.content_hash = c.content_hash)").fetchone()[0]
    assert drift == 0
    logged = [k for (keys,) in conn.execute("SELECT keys FROM blobgc.deletion_log") for k in keys]
    assert len(logged) == len(set(logged)) and set(logged) <= {content_key(h) for h in doomed}  # each owed once
    left = {h for (h,) in conn.execute("SELECT content_hash FROM app.content WHERE ref_count = 0")}
    assert left | {k.removeprefix("pastes/") for k in logged} == doomed  # the rest wait for an orphan plan


def test_a_run_cleared_whole_after_its_gate_keeps_its_plan_and_executes_the_rest(conn, s3, bucket, redis,
                                                                                  redis_prefix):
    """A backfill reprocessing a failed run re-runs its planning tasks: they keep the judged plan, plan nothing."""
    for i in range(4):
        create_paste(conn, s3, redis, bucket=bucket, content=f"judged {i}".encode(), expires_at=PAST,
                     redis_prefix=redis_prefix)
    run = plan(conn, "judged", bucket, batch_size=2)
    items = plan_rows(conn, "judged")
    record_judgement(conn, run, judge(conn, run, GateSettings()), PASSED)
    late = create_paste(conn, s3, redis, bucket=bucket, content=b"due after the gate", expires_at=PAST,
                        redis_prefix=redis_prefix)
    assert not restart_expiry_plan(conn, run)
    assert check_ref_counts(conn, run, bucket=bucket, plan_orphans=True).orphans_planned == 0
    assert plan_expiry(conn, run, expired_before=run.reference_time, bucket=bucket).pastes == 0
    assert plan_rows(conn, "judged") == items
    assert execute(conn, run).pastes_deleted == 4
    assert pastes_left(conn) == {late.short_code}  # not in the judged plan
