"""
### blobgc_crawler: fetch partner photos for offers, with the URL-hash cache (seed 001)

Triggered with conf `{"requests": [{"offer_id": 1, "urls": ["https://…/a.jpg", …]}]}`; every 10
minutes, and whenever it runs without conf, it takes the application's pending
`app.crawl_request` rows instead.

1. **stage_requests** checks the Variables (`blobgc_image_sizes`, `blobgc_crawler_allowed_networks`),
   validates the requests and stages one row per (offer, URL) in `blobgc.crawl_item`, cut into
   batches of about `urls_per_batch` (every URL hash in one batch). A bad Variable fails the run
   here, before anything is staged or fetched.
2. **crawl_batch** (mapped, one task per batch, in pool `blobgc_http`) follows the seed's three
   branches for every URL, by `url_hash` (the md5 of the URL):
   - not seen within `cache_days`: download (streamed, timeouts, a size cap, retries on 5xx and
     timeouts), crop-resize-split-upload once, and a new row;
   - a row bound to another offer: a new row with the same `image_id`, no download;
   - an unbound row: bind it, with `num` and `last_update`.

   Cached URLs are looked up and written in one batch. A bad URL (404, timeout, not an image,
   decompression bomb, oversize) is recorded as failed and does not fail the batch; nothing
   half-written is left (files are owed before they are uploaded, and their row is inserted
   with the removal of that debt).

   Only http and https are fetched, and only from public addresses: loopback, link-local,
   private, multicast and reserved addresses are refused (checked after DNS resolution, on every
   redirect hop and on the connected socket) unless Variable `blobgc_crawler_allowed_networks`
   (a JSON list of CIDRs) lists them. A refused URL is recorded as failed with its reason
   (`refused_address: ...`, `refused_scheme: ...`). A transaction that PostgreSQL fails as a
   deadlock victim is retried (at most 5 times, with jitter) and counted in `retries`.
3. **report** marks the claimed requests done and records the outcomes per URL, and the retries.

Re-running the same requests creates no duplicate rows.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import CronTriggerTimetable, Param, dag, get_current_context, task

from blobgc.airflow_adapters import (
    DEFAULT_ARGS,
    HTTP_POOL,
    crawler_allowed_networks,
    cutoff,
    failing_fast,
    gc_task,
    image_settings,
    s3_client,
)


@dag(
    dag_id="blobgc_crawler",
    schedule=CronTriggerTimetable("*/10 * * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={
        "requests": Param(None, type=["null", "array"],
                          description='[{"offer_id": int, "urls": [str, ...]}]; empty: the pending app.crawl_request rows'),
        "cache_days": Param(14, type="integer", minimum=0,
                            description="A URL seen within this many days is never downloaded again."),
        "urls_per_batch": Param(50, type="integer", minimum=1, maximum=1000,
                                description="URLs per mapped crawl_batch task."),
        "max_download_mb": Param(20, type="integer", minimum=1, maximum=200,
                                 description="Downloads larger than this are refused (oversize)."),
    },
    tags=["blobgc", "seed-001", "images", "crawler"],
    doc_md=__doc__,
)
def blobgc_crawler():
    @task
    def stage_requests() -> list[int]:
        from blobgc.crawler import claim_pending_requests, parse_requests, stage_items

        # bad Variables fail the run here, before anything is claimed, staged or fetched
        with failing_fast():
            image_settings()
            crawler_allowed_networks()
        context = get_current_context()
        params = context["params"]
        with gc_task(context) as (conn, run):
            if params["requests"] is not None:
                requests = parse_requests(params["requests"])
            else:
                requests = claim_pending_requests(conn, run.run_id)
            return stage_items(conn, run.run_id, requests, params["urls_per_batch"])

    @task(pool=HTTP_POOL, map_index_template="batch {{ task.op_kwargs['batch_no'] }}")
    def crawl_batch(batch_no: int) -> dict:
        import requests as http

        from blobgc.crawler import batch_items, outcome_counts, record_outcomes
        from blobgc.downloads import DownloadPolicy
        from blobgc.images import crawl

        context = get_current_context()
        params = context["params"]
        with gc_task(context) as (conn, run), http.Session() as session:
            session.headers["User-Agent"] = "blobgc-crawler/1.0"
            items = batch_items(conn, run.run_id, batch_no)
            policy = DownloadPolicy(max_bytes=params["max_download_mb"] * 1024 * 1024,
                                    allowed_networks=crawler_allowed_networks())
            outcomes = crawl(conn, s3_client(), session, image_settings(), items,
                             seen_since=cutoff(run, days=params["cache_days"]), policy=policy, run_id=run.run_id)
            record_outcomes(conn, run.run_id, outcomes)
        return outcome_counts(outcomes)

    @task
    def report(batches: list[dict]) -> dict:
        from blobgc.crawler import finish_crawl
        from blobgc.airflow_adapters import finish_dag_run

        retries = sum(counts.get("retries", 0) for counts in batches)
        with gc_task(get_current_context()) as (conn, run):
            summary = finish_crawl(conn, run.run_id)
            details = {"urls": summary, "retries": retries}
            return {**finish_dag_run(conn, run, details), **details}

    report(crawl_batch.expand(batch_no=stage_requests()))


blobgc_crawler()
