"""blobgc_crawler under Airflow."""
from __future__ import annotations

import json


from tests.helpers import object_keys, run_dag
from tests.support.images import image_rows


def test_airflow_crawler_dag_with_conf_then_pending_requests(conn, s3, bucket, photos, offers):
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}
    conf = {"requests": [{"offer_id": 1, "urls": [photos.url("/photo/70.jpg"), photos.url("/missing.jpg")]},
                         {"offer_id": 2, "urls": [photos.url("/photo/70.jpg")]},
                         {"offer_id": 999, "urls": [photos.url("/photo/71.jpg")]}]}
    result = run_dag("blobgc_crawler", conf=conf, env_extra=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outcomes = dict(conn.execute("SELECT url || ' offer ' || offer_id, outcome FROM blobgc.crawl_item").fetchall())
    assert outcomes == {f"{photos.url('/photo/70.jpg')} offer 1": "new",
                        f"{photos.url('/missing.jpg')} offer 1": "failed",
                        f"{photos.url('/photo/70.jpg')} offer 2": "linked",
                        f"{photos.url('/photo/71.jpg')} offer 999": "failed"}
    assert photos.hits["/photo/70.jpg"] == 1 and photos.hits["/photo/71.jpg"] == 0

    with conn.transaction():
        conn.execute("INSERT INTO app.crawl_request (offer_id, urls) VALUES (3, %s)",
                     ([photos.url("/photo/70.jpg"), photos.url("/photo/72.jpg")],))
    pending = run_dag("blobgc_crawler", env_extra=env)
    assert pending.returncode == 0, pending.stdout[-3000:]
    assert conn.execute("SELECT status FROM app.crawl_request").fetchone()[0] == "done"
    assert conn.execute("SELECT count(*) FROM app.image WHERE offer_id = 3").fetchone()[0] == 2
    assert photos.hits["/photo/70.jpg"] == 1 and photos.hits["/photo/72.jpg"] == 1


def test_airflow_crawler_refuses_malformed_requests_before_staging_anything(conn):
    result = run_dag("blobgc_crawler", conf={"requests": [{"offer_id": "x", "urls": []}]},
                     env_extra={"BLOBGC_TASK_RETRIES": "0"})
    assert result.returncode != 0
    assert "offer_id must be a positive integer" in result.stdout + result.stderr
    assert conn.execute("SELECT count(*) FROM blobgc.crawl_item").fetchone()[0] == 0


def test_airflow_crawler_refuses_private_addresses_without_the_allow_list(conn, bucket, photos, offers):
    """The DAG takes the allow-list from Variable blobgc_crawler_allowed_networks; empty, loopback is refused,
    and so is a pending request's file:// URL; each is recorded with its reason and the run succeeds."""
    with conn.transaction():
        conn.execute("INSERT INTO app.crawl_request (offer_id, urls) VALUES (1, %s)",
                     ([photos.url("/photo/75.jpg"), "file:///etc/passwd"],))
    result = run_dag("blobgc_crawler", env_extra={
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_CRAWLER_ALLOWED_NETWORKS": "[]"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    items = dict(conn.execute("SELECT url, outcome || ' ' || split_part(error, ':', 1) FROM blobgc.crawl_item"))
    assert items == {photos.url("/photo/75.jpg"): "failed refused_address", "file:///etc/passwd": "failed refused_scheme"}
    assert photos.hits["/photo/75.jpg"] == 0 and image_rows(conn) == []


def test_image_size_names_that_are_not_ascii_fail_the_crawler_before_staging(conn, s3, bucket, photos, offers):
    conf = {"requests": [{"offer_id": 1, "urls": [photos.url("/photo/76.jpg")]}]}
    result = run_dag("blobgc_crawler", conf=conf, env_extra={
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_IMAGE_SIZES": json.dumps({"orig": 0, "миниатюра": 160}),
        "BLOBGC_TASK_RETRIES": "0"})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Variable blobgc_image_sizes: size name 'миниатюра' is not allowed" in output, output[-3000:]
    assert conn.execute("SELECT count(*) FROM blobgc.crawl_item").fetchone()[0] == 0
    assert photos.hits["/photo/76.jpg"] == 0 and image_rows(conn) == [] and object_keys(s3, bucket) == set()
