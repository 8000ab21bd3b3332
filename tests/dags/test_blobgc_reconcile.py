"""blobgc_reconcile under Airflow."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from blobgc.core.inventory import Destination
from blobgc.core.runs import ensure_run
from blobgc.inventory import report_of_bucket
from tests.helpers import airflow_api, object_keys, run_dag
from tests.support.reconcile import DAG, age, contents_rows, new_run, owed, put, reconcile_all, sha


def test_airflow_reconcile_dag_maps_one_task_per_shard(conn, s3, bucket):
    contents_rows(conn, sha("live"))
    put(s3, bucket, f"pastes/{sha('live')}", f"pastes/{sha('dead')}", f"images/3f/3f{'0' * 30}/big.jpg",
        "blobs/abc/raw", "tmp/x")
    age(s3, bucket)
    result = run_dag(DAG, conf={"min_age_hours": 1}, env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
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
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "min_age_hours" in output, output[-3000:]
    assert len(object_keys(s3, bucket)) == 1



def inventory_env(bucket: str, reports: str) -> dict[str, str]:
    return {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket,
            "AIRFLOW_VAR_BLOBGC_INVENTORY": json.dumps({bucket: f"s3://{reports}/inventories"})}


def test_airflow_reconcile_from_an_inventory_deletes_its_orphans_in_one_task_per_bucket(conn, s3, bucket, reports):
    contents_rows(conn, sha("live"))
    put(s3, bucket, f"pastes/{sha('live')}", f"pastes/{sha('dead')}", "blobs/abc/raw", "tmp/x")
    age(s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inventories/"), file_format="parquet")
    result = run_dag(DAG, conf={"min_age_hours": 1, "source": "inventory"}, env_extra=inventory_env(bucket, reports))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    instances = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{result.run_id}/taskInstances?limit=100")["task_instances"]
    mapped = [t for t in instances if t["task_id"] == "reconcile_shard"]
    assert [t["rendered_map_index"] for t in mapped] == [f"inventory of {bucket}"]
    assert object_keys(s3, bucket) == {f"pastes/{sha('live')}", "tmp/x"}  # orphans gone, unknown kept
    assert {r[0] for r in conn.execute("SELECT key FROM blobgc.reconcile_finding WHERE kind = 'unknown_key'")} == {
        "tmp/x"}


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
    result = run_dag(DAG, conf={"min_age_hours": 1, "listing_ranges": 2}, env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    instances = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{result.run_id}/taskInstances?limit=100")["task_instances"]
    ranges = sorted(t["rendered_map_index"] for t in instances
                    if t["task_id"] == "reconcile_shard" and t["rendered_map_index"].startswith("pastes/"))
    assert ranges == ["pastes/0 [pastes/08, …)", "pastes/0 […, pastes/08)"]
    assert object_keys(s3, bucket) == set()
