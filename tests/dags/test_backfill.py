"""Every DAG can be backfilled with the Airflow CLI."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tests.helpers import airflow


def test_every_dag_can_be_backfilled():
    # backfill reads the serialized DAGs; make sure the current files are serialized, whatever ran first
    reserialized = airflow("dags", "reserialize")
    assert reserialized.returncode == 0, reserialized.stderr[-2000:]
    # a day each DAG's schedule runs on between 2026-11-01 and 2026-11-03 (blobgc_reconcile is weekly, on Sundays)
    cases = (("blobgc_mark", "2026-11-02"), ("blobgc_sweep", "2026-11-02"), ("blobgc_paste_expiry", "2026-11-02"),
             ("blobgc_crawler", "2026-11-02"), ("blobgc_image_cleanup", "2026-11-02"), ("blobgc_reconcile", "2026-11-01"),
             ("blobgc_generations", "2026-11-02"), ("blobgc_media_staging", "2026-11-02"),
             ("blobgc_media_thumbnails", "2026-11-02"))

    def backfill_dry_run(case: tuple[str, str]):
        return airflow("backfill", "create", "--dag-id", case[0], "--from-date", "2026-11-01", "--to-date", "2026-11-03",
                       "--dry-run")

    with ThreadPoolExecutor(3) as pool:  # each CLI call is mostly Airflow's import time
        results = list(pool.map(backfill_dry_run, cases))
    for (dag_id, day), result in zip(cases, results, strict=True):
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert day in result.stdout, (dag_id, result.stdout[-2000:])
