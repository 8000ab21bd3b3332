"""docker-compose.yaml and airflow_settings.yaml declare what the contract names."""
from __future__ import annotations

from pathlib import Path

import yaml


ROOT = Path(__file__).resolve().parents[2]


CONN_IDS = {"blobgc_postgres", "blobgc_s3", "blobgc_redis"}


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def test_compose_has_the_production_services():
    services = compose()["services"]
    for name in ("postgres", "redis", "minio", "airflow-apiserver", "airflow-scheduler",
                 "airflow-dag-processor", "airflow-triggerer", "airflow-worker"):
        assert name in services, name


def test_compose_airflow_uses_celery_and_mounts_dags_plugins_include():
    services = compose()["services"]
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
                 "airflow-worker"):
        service = services[name]
        assert service["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        targets = {v.split(":")[1] for v in service["volumes"]}
        assert {"/opt/airflow/dags", "/opt/airflow/plugins", "/opt/airflow/include"} <= targets
        for conn_id in CONN_IDS:
            assert f"AIRFLOW_CONN_{conn_id.upper()}" in service["environment"]


def test_airflow_settings_declare_connections_variables_and_pool():
    settings = yaml.safe_load((ROOT / "airflow_settings.yaml").read_text())["airflow"]
    assert {c["conn_id"] for c in settings["connections"]} == CONN_IDS
    types = {c["conn_id"]: c["conn_type"] for c in settings["connections"]}
    assert types == {"blobgc_postgres": "postgres", "blobgc_s3": "aws", "blobgc_redis": "redis"}
    variables = {v["variable_name"]: v["variable_value"] for v in settings["variables"]}
    assert variables["blobgc_bucket"] == "blobgc"
    assert variables["blobgc_media_bucket_prefix"] == "fakebook-"
    assert "blobgc_s3" in {p["pool_name"] for p in settings["pools"]}
