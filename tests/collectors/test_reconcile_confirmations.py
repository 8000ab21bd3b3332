"""Orphans confirmed over several runs (issue 32, Param `confirmations`): planned only once that many consecutive
real reconcile runs found them orphaned, their object unchanged; by listing and from inventories alike."""
from __future__ import annotations

from blobgc.collectors.reconcile.from_inventory import locate, reconcile_from_inventory, scope_of
from blobgc.collectors.reconcile.listing import reconcile_shard
from blobgc.collectors.reconcile.report import summarize
from blobgc.collectors.reconcile.shards import discover_shards
from blobgc.core.inventory_reports import Destination
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.runs import RunRef
from blobgc.inventory import report_of_bucket
from tests.helpers import backdate_object, object_keys
from tests.support.reconcile import (
    DAG,
    age,
    contents_rows,
    execute_plan,
    floor_cutoff,
    new_run,
    owed,
    planned,
    put,
    reconcile_all,
    sha,
)

ORPHAN = f"pastes/{sha('orphan')}"


def real_run(conn, s3, bucket, name: str, confirmations: int = 2, prefixes: list[str] | None = None) -> set[str]:
    """A real run over the bucket (or the shards under `prefixes`), its plan owed and drained; the keys it planned."""
    run = new_run(conn, name)
    for shard in discover_shards(s3, bucket, prefixes, conn=conn):
        reconcile_shard(conn, s3, run, shard, bucket=bucket, cutoff=floor_cutoff(), confirmations=confirmations)
    execute_plan(conn, run)
    delete_owed_objects(conn, s3, run)
    return planned(conn, run)


def inventory_run(conn, s3, bucket, reports, name: str, confirmations: int = 2) -> set[str]:
    """A real run from the bucket's newest inventory report, its plan owed and drained; the keys it planned."""
    run = new_run(conn, name)
    report = locate(s3, {bucket: f"s3://{reports}/inv"}, bucket, run.reference_time, 48)
    scope = scope_of(conn, bucket, [], bucket, seeds=True, prefixes=None)
    reconcile_from_inventory(conn, s3, s3, run, scope, report.location, cutoff=floor_cutoff(), max_age_hours=48,
                             confirmations=confirmations)
    execute_plan(conn, run)
    delete_owed_objects(conn, s3, run)
    return planned(conn, run)


def sightings(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT key FROM blobgc.reconcile_sighting")}


def test_an_orphan_seen_once_is_not_deleted_and_is_reported_waiting(conn, s3, bucket):
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    assert real_run(conn, s3, bucket, "r1") == set()
    assert owed(conn) == set() and object_keys(s3, bucket) == {ORPHAN}
    report = summarize(conn, RunRef(DAG, "r1"))
    assert (report["orphans"], report["waiting"], report["waiting_sample"]) == (0, 1, [ORPHAN])


def test_an_orphan_seen_on_two_consecutive_real_runs_is_deleted(conn, s3, bucket):
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    assert real_run(conn, s3, bucket, "r1") == set()
    assert real_run(conn, s3, bucket, "r2") == {ORPHAN}
    assert object_keys(s3, bucket) == set()


def test_an_orphan_a_row_accounts_for_again_between_runs_starts_over(conn, s3, bucket):
    digest = sha("orphan")
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    assert real_run(conn, s3, bucket, "r1") == set()
    contents_rows(conn, digest)  # a row forms the key again at run 2 ...
    assert real_run(conn, s3, bucket, "r2") == set()
    with conn.transaction():  # ... and goes again before run 3
        conn.execute("DELETE FROM app.content WHERE content_hash = %s", (digest,))
    assert real_run(conn, s3, bucket, "r3") == set()  # seen once since: waits
    assert object_keys(s3, bucket) == {ORPHAN}
    assert real_run(conn, s3, bucket, "r4") == {ORPHAN}


def test_an_orphan_written_again_between_runs_starts_over(conn, s3, bucket):
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    assert real_run(conn, s3, bucket, "r1") == set()
    put(s3, bucket, ORPHAN, body=b"54321")  # written again (same size), then past the floor again
    backdate_object(bucket, ORPHAN, 47 * 3600)
    assert real_run(conn, s3, bucket, "r2") == set()
    assert object_keys(s3, bucket) == {ORPHAN}
    assert real_run(conn, s3, bucket, "r3") == {ORPHAN}


def test_a_dry_run_records_no_sighting_and_reports_what_it_would_delete_and_what_waits(conn, s3, bucket):
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    first = new_run(conn, "d1", dry_run=True)
    reconcile_all(conn, s3, bucket, first, confirmations=2)
    assert sightings(conn) == set()
    assert planned(conn, first) == set()  # would delete nothing ...
    assert (summarize(conn, first)["waiting"], summarize(conn, first)["waiting_sample"]) == (1, [ORPHAN])  # ... yet
    assert real_run(conn, s3, bucket, "r1") == set()  # the dry run did not count: this is the first sight
    second = new_run(conn, "d2", dry_run=True)
    reconcile_all(conn, s3, bucket, second, confirmations=2)
    # a dry run is no sighting of its own: one real run saw it, so it waits (its plan, executed, would delete nothing)
    assert planned(conn, second) == set() and summarize(conn, second)["waiting"] == 1
    assert real_run(conn, s3, bucket, "r2", confirmations=3) == set()  # a second real sighting (3 asked: it waits)
    third = new_run(conn, "d3", dry_run=True)
    reconcile_all(conn, s3, bucket, third, confirmations=2)
    assert planned(conn, third) == {ORPHAN} and summarize(conn, third)["waiting"] == 0  # two real runs in a row
    assert object_keys(s3, bucket) == {ORPHAN}


def test_confirmations_1_deletes_on_first_sight(conn, s3, bucket):
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    assert real_run(conn, s3, bucket, "r1", confirmations=1) == {ORPHAN}
    assert object_keys(s3, bucket) == set()


def test_a_task_that_reconciles_its_shard_again_in_the_same_run_counts_once(conn, s3, bucket):
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    run = new_run(conn, "r1")
    for _ in range(2):
        with conn.transaction():  # no checkpoint to resume from: the retried task lists its shard again
            conn.execute("DELETE FROM blobgc.reconcile_checkpoint WHERE run_id = 'r1'")
        for shard in discover_shards(s3, bucket, conn=conn):
            reconcile_shard(conn, s3, run, shard, bucket=bucket, cutoff=floor_cutoff(), confirmations=2)
    execute_plan(conn, run)
    assert planned(conn, run) == set() and owed(conn) == set()
    assert real_run(conn, s3, bucket, "r2") == {ORPHAN}


def test_a_run_limited_by_prefixes_only_delays_deletions_out_of_its_prefixes(conn, s3, bucket):
    blob = "blobs/orphan/raw"
    put(s3, bucket, ORPHAN, blob)
    age(s3, bucket)
    assert real_run(conn, s3, bucket, "r1") == set()
    assert real_run(conn, s3, bucket, "r2", prefixes=["pastes/"]) == {ORPHAN}  # blobs/ not listed: not found
    assert real_run(conn, s3, bucket, "r3") == set()  # blobs/orphan starts over
    assert object_keys(s3, bucket) == {blob}
    assert real_run(conn, s3, bucket, "r4") == {blob}


def test_sightings_of_keys_no_longer_orphans_or_listed_are_forgotten(conn, s3, bucket):
    kept, claimed, gone = (f"pastes/{sha(x)}" for x in ("kept", "claimed", "gone"))
    put(s3, bucket, kept, claimed, gone)
    age(s3, bucket)
    real_run(conn, s3, bucket, "r1", confirmations=3)
    assert sightings(conn) == {kept, claimed, gone}
    contents_rows(conn, sha("claimed"))  # a row accounts for it again
    s3.delete_object(Bucket=bucket, Key=gone)  # no longer listed
    real_run(conn, s3, bucket, "r2", confirmations=3)
    assert sightings(conn) == {kept, claimed, gone}  # r1's pass is the one before r2's: kept a run longer
    real_run(conn, s3, bucket, "r3", confirmations=3)
    assert sightings(conn) == {kept}  # only the sightings of this pass and the one before it are kept
    assert conn.execute("SELECT seen FROM blobgc.reconcile_sighting").fetchone()[0] == 3


def test_the_inventory_path_confirms_orphans_over_several_runs(conn, s3, bucket, reports):
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"), file_format="parquet")
    assert inventory_run(conn, s3, bucket, reports, "r1") == set()
    assert object_keys(s3, bucket) == {ORPHAN}
    assert summarize(conn, RunRef(DAG, "r1"))["waiting"] == 1
    assert inventory_run(conn, s3, bucket, reports, "r2") == {ORPHAN}
    assert object_keys(s3, bucket) == set()


def test_a_listing_run_and_an_inventory_run_confirm_each_other(conn, s3, bucket, reports):
    put(s3, bucket, ORPHAN)
    age(s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"), file_format="csv")
    assert real_run(conn, s3, bucket, "r1") == set()
    assert inventory_run(conn, s3, bucket, reports, "r2") == {ORPHAN}
    assert object_keys(s3, bucket) == set()
