"""blobgc_reconcile under Airflow."""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from blobgc.core.inventory_reports import Destination
from blobgc.core.runs import ensure_run
from blobgc.inventory import report_of_bucket
from tests.helpers import airflow_api, assert_param_refused, backdate_object, object_keys, run_dag
from tests.support.collections import add_upload, create_shop, new_schema, shop_yaml, write_collections
from tests.support.reconcile import DAG, age, contents_rows, new_run, owed, put, reconcile_all, sha


def test_airflow_reconcile_dag_maps_one_task_per_shard(conn, s3, bucket):
    contents_rows(conn, sha("live"))
    put(s3, bucket, f"pastes/{sha('live')}", f"pastes/{sha('dead')}", f"images/3f/3f{'0' * 30}/big.jpg",
        "blobs/abc/raw", "tmp/x")
    age(s3, bucket)
    result = run_dag(DAG, conf={"min_age_hours": 1, "confirmations": 1},
                     env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    shards = {r[0] for r in conn.execute("SELECT shard FROM blobgc.reconcile_checkpoint WHERE done")}
    instances = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{result.run_id}/taskInstances?limit=100")["task_instances"]
    mapped = [t for t in instances if t["task_id"] == "reconcile_shard"]
    # plus one shard per key prefix of the default file's second collection (studio_assets), empty here
    expected = {f"pastes/{sha('live')[0]}", f"pastes/{sha('dead')[0]}", "images/3f/", "blobs/a", "tmp/",
                "studio_assets:studio/", "studio_assets:studio-previews/"}
    assert shards == expected
    assert len(mapped) == len(expected)
    assert {t["state"] for t in mapped} == {"success"}
    assert object_keys(s3, bucket) == {f"pastes/{sha('live')}", "tmp/x"}  # orphans gone, unknown kept


def test_min_age_floor_refuses_less_than_an_hour(conn, s3, bucket):
    """Finding 7: an age floor below 1 hour is refused, by the Param and by the collector itself."""
    put(s3, bucket, f"pastes/{sha('just uploaded, row on its way')}")
    run = new_run(conn)
    run = ensure_run(conn, run)
    with pytest.raises(ValueError, match="min_age_hours must be at least 1"):
        reconcile_all(conn, s3, bucket, run, cutoff=run.reference_time - timedelta(minutes=30))
    assert owed(conn) == set()
    result = run_dag(DAG, conf={"min_age_hours": 0}, env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert_param_refused(result, "Invalid input for param min_age_hours: 0 is less than the minimum of 1")
    assert len(object_keys(s3, bucket)) == 1


def test_airflow_reconcile_by_default_deletes_an_orphan_on_its_second_real_run(conn, s3, bucket):
    """Issue 32: Param `confirmations` defaults to 2. The first run keeps the orphan and reports it waiting for
    confirmation; the second deletes it."""
    orphan = f"pastes/{sha('dead')}"
    put(s3, bucket, orphan)
    age(s3, bucket)
    runs = []
    for _ in range(2):
        result = run_dag(DAG, conf={"min_age_hours": 1}, env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
        assert result.returncode == 0, result.output[-3000:]
        (details,) = conn.execute("SELECT details FROM blobgc.run WHERE dag_id = %s AND run_id = %s",
                                  (DAG, result.run_id)).fetchone()
        runs.append((details["reconcile"]["orphans"], details["reconcile"]["waiting"], object_keys(s3, bucket)))
    assert runs == [(0, 1, {orphan}), (1, 0, set())]



def inventory_env(bucket: str, reports: str) -> dict[str, str]:
    return {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket,
            "AIRFLOW_VAR_BLOBGC_INVENTORY": json.dumps({bucket: f"s3://{reports}/inventories"})}


def test_airflow_reconcile_from_an_inventory_deletes_its_orphans_in_one_mapped_task_per_part(conn, s3, bucket,
                                                                                              reports):
    """The first task writes the report's keys and the formed keys into part files in the scratch location (the
    reports' bucket, .blobgc-scratch/), removing what earlier runs left there over 7 days ago; each part is a mapped
    task, which deletes its files once done."""
    contents_rows(conn, sha("live"))
    put(s3, bucket, f"pastes/{sha('live')}", f"pastes/{sha('dead')}", "blobs/abc/raw", "tmp/x")
    age(s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inventories/"), file_format="parquet")
    left_by_an_earlier_run = f".blobgc-scratch/{DAG}/scheduled__2026-11-01T05:00:00+00:00/{bucket}/x.parquet"
    left_days_ago = f".blobgc-scratch/{DAG}/scheduled__2026-11-22T05:00:00+00:00/{bucket}/x.parquet"
    put(s3, reports, left_by_an_earlier_run, left_days_ago)
    backdate_object(reports, left_by_an_earlier_run, 8 * 86400)  # a failed run's parts are kept for 7 days
    backdate_object(reports, left_days_ago, 2 * 86400)
    result = run_dag(DAG, conf={"min_age_hours": 1, "source": "inventory", "confirmations": 1,
                                "inventory_part_keys": 2, "inventory_part_threads": 1},
                     env_extra=inventory_env(bucket, reports))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    output = result.stdout + result.stderr
    for part in (1, 2):  # each part's join on the threads the Param gives it
        assert re.search(rf"inventory:{bucket}:[0-9a-f]+:{part}/2: joined by DuckDB on 1 thread\(s\)", output), \
            output[-3000:]
    instances = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{result.run_id}/taskInstances?limit=100")["task_instances"]
    mapped = [t for t in instances if t["task_id"] == "reconcile_shard"]
    assert sorted(t["rendered_map_index"] for t in mapped) == [f"inventory of {bucket}, part {p}/2" for p in (1, 2)]
    assert object_keys(s3, bucket) == {f"pastes/{sha('live')}", "tmp/x"}  # orphans gone, unknown kept
    assert {r[0] for r in conn.execute("SELECT key FROM blobgc.reconcile_finding WHERE kind = 'unknown_key'")} == {
        "tmp/x"}
    # no part file of this run is left; of earlier runs', those younger than 7 days (their parts may be re-run)
    assert {k for k in object_keys(s3, reports) if k.startswith(".blobgc-scratch/")} == {left_days_ago}


def test_airflow_reconcile_fails_on_a_stale_inventory_without_listing(conn, s3, bucket, reports):
    put(s3, bucket, f"pastes/{sha('dead')}")
    age(s3, bucket, hours=100)
    report_of_bucket(s3, bucket, Destination(reports, "inventories/"),
                     taken=datetime.now(timezone.utc) - timedelta(hours=60))
    result = run_dag(DAG, conf={"min_age_hours": 1, "source": "inventory"}, env_extra=inventory_env(bucket, reports))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "older than max_inventory_age_hours=48" in output, output[-3000:]
    assert result.task_states["plan_shards"] == "failed"
    assert object_keys(s3, bucket) == {f"pastes/{sha('dead')}"}
    assert owed(conn) == set()


def test_airflow_reconcile_lists_ranges_of_a_shard_side_by_side(conn, s3, bucket):
    orphans = [f"pastes/0{c}{sha(c)[2:]}" for c in "0123456789abcdef"]  # one shard, pastes/0
    put(s3, bucket, *orphans)
    age(s3, bucket)
    result = run_dag(DAG, conf={"min_age_hours": 1, "listing_ranges": 2, "confirmations": 1},
                     env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    instances = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{result.run_id}/taskInstances?limit=100")["task_instances"]
    ranges = sorted(t["rendered_map_index"] for t in instances
                    if t["task_id"] == "reconcile_shard" and t["rendered_map_index"].startswith("pastes/"))
    assert ranges == ["pastes/0 [pastes/08, …)", "pastes/0 […, pastes/08)"]
    assert object_keys(s3, bucket) == set()


def two_shops(conn, s3, bucket: str, tmp_path) -> tuple[str, str, dict[str, str]]:
    """Collections `a` and `b` (shops keyed under `<name>/` and `<name>-thumbs/`) in `bucket`, each with one
    upload and one old orphan, and the file declaring them (env of a run)."""
    a, b = new_schema(), new_schema()
    for schema in (a, b):
        create_shop(conn, schema)
        add_upload(conn, s3, schema, bucket, 1, f"{schema} live".encode(), prefix=f"{schema}/",
                   thumbs=f"{schema}-thumbs/")
        put(s3, bucket, f"{schema}/{sha('no row')}.png")
    text = shop_yaml(a, bucket, name=a, prefix=f"{a}/", thumbs=f"{a}-thumbs/") + \
        shop_yaml(b, bucket, name=b, prefix=f"{b}/", thumbs=f"{b}-thumbs/").replace("collections:\n", "")
    return a, b, {"BLOBGC_COLLECTIONS": str(write_collections(tmp_path, text)), "AIRFLOW_VAR_BLOBGC_BUCKET": bucket}


def test_collections_param_scope_a_listing_run_of_one_collection_touches_nothing_else(conn, s3, bucket, tmp_path):
    """Issue 29, finding 8: with `collections: [a]`, a listing run lists, plans and reports a's prefixes only: not
    the seed layouts' (an old `pastes/` orphan), not another collection's (b's orphan), not unknown folders."""
    a, b, env = two_shops(conn, s3, bucket, tmp_path)
    put(s3, bucket, f"pastes/{sha('no content row')}", "tmp/unknown.bin")
    age(s3, bucket)
    before = object_keys(s3, bucket)
    result = run_dag(DAG, conf={"collections": [a], "min_age_hours": 1, "confirmations": 1}, env_extra=env)
    assert result.returncode == 0, result.output[-3000:]
    assert before - object_keys(s3, bucket) == {f"{a}/{sha('no row')}.png"}  # a's orphan went, nothing else
    assert {r[0] for r in conn.execute("SELECT shard FROM blobgc.reconcile_checkpoint")} == {
        f"{a}:{a}/", f"{a}:{a}-thumbs/"}
    assert {r[0] for r in conn.execute("SELECT unnest(keys) FROM blobgc.plan_item")} == {f"{a}/{sha('no row')}.png"}
    assert conn.execute("SELECT count(*) FROM blobgc.reconcile_finding").fetchone()[0] == 0


def test_collections_param_scope_an_inventory_run_needs_only_its_collections_reports(conn, s3, bucket,
                                                                                     versioned_bucket, reports,
                                                                                     tmp_path):
    """Issue 29, finding 8: `source: inventory` with `collections: [a]`, a's objects in a bucket of their own, reads
    that bucket's report only: the run's bucket (seed layouts, with an old orphan) has none and needs none."""
    a, _b, env = two_shops(conn, s3, versioned_bucket, tmp_path)
    put(s3, bucket, f"pastes/{sha('no content row')}")
    age(s3, bucket)
    age(s3, versioned_bucket)
    report_of_bucket(s3, versioned_bucket, Destination(reports, "inventories/"), file_format="parquet")
    before = object_keys(s3, versioned_bucket)
    env = {**env, **inventory_env(versioned_bucket, reports), "AIRFLOW_VAR_BLOBGC_BUCKET": bucket}
    result = run_dag(DAG, conf={"collections": [a], "min_age_hours": 1, "source": "inventory", "confirmations": 1},
                     env_extra=env)
    assert result.returncode == 0, result.output[-3000:]
    instances = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{result.run_id}/taskInstances?limit=100")["task_instances"]
    assert [t["rendered_map_index"] for t in instances if t["task_id"] == "reconcile_shard"] == [
        f"inventory of {versioned_bucket}, part 1/1"]
    assert before - object_keys(s3, versioned_bucket) == {f"{a}/{sha('no row')}.png"}
    assert object_keys(s3, bucket) == {f"pastes/{sha('no content row')}"}
    assert conn.execute("SELECT count(*) FROM blobgc.reconcile_finding").fetchone()[0] == 0
