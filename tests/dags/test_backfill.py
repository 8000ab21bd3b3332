"""Every DAG can be backfilled: the api-server's backfill dry run, which `airflow backfill create --dry-run` and the
UI's backfill form also run, lists the day each DAG's schedule runs on. (`airflow backfill create` itself runs in
tests/dags/test_operations.py, as the runbook has it.)"""
from __future__ import annotations

import pytest

from tests.helpers import airflow_api

# a day each DAG's schedule runs on between 2026-11-01 and 2026-11-03 (blobgc_reconcile is weekly, on Sundays)
CASES = (("blobgc_mark", "2026-11-02"), ("blobgc_sweep", "2026-11-02"), ("blobgc_paste_expiry", "2026-11-02"),
         ("blobgc_crawler", "2026-11-02"), ("blobgc_image_cleanup", "2026-11-02"), ("blobgc_reconcile", "2026-11-01"),
         ("blobgc_generations", "2026-11-02"), ("blobgc_media_staging", "2026-11-02"),
         ("blobgc_media_thumbnails", "2026-11-02"))


@pytest.mark.parametrize(("dag_id", "day"), CASES)
def test_every_dag_can_be_backfilled(stack, dag_id, day):
    dry_run = airflow_api("/api/v2/backfills/dry_run", method="POST", body={
        "dag_id": dag_id, "from_date": "2026-11-01T00:00:00Z", "to_date": "2026-11-03T00:00:00Z"})
    days = {run["logical_date"][:10] for run in dry_run["backfills"]}
    assert day in days, (dag_id, dry_run)
