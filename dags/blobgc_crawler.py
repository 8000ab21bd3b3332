"""
### blobgc_crawler: fetch partner photos for offers, with the URL-hash cache (seed 001)

Triggered with conf `{"requests": [{"offer_id": 1, "urls": ["https://…/a.jpg", …]}]}`; every 10
minutes, and whenever it runs without conf, it takes the application's pending `app.crawl_request`.

1. **stage_requests** checks the Variables (`blobgc_image_sizes`, `blobgc_crawler_allowed_networks`;
   a bad one fails the run before anything is staged), validates the requests and stages one row
   per (offer, URL) in `blobgc.crawl_item`, in batches of about `urls_per_batch`.
2. **crawl_batch** (mapped, pool `blobgc_http`) follows the seed's three branches by `url_hash`: a URL
   not seen within `cache_days` is downloaded (streamed, capped, retried) and crop-resize-split-uploaded
   once, with a new row; one bound to another offer gets a new row with the same `image_id`; an
   unbound row is bound again. A bad URL (404, timeout, not an image, a bomb, oversize, a loopback,
   link-local, private or multicast address not allowed, a scheme other than http(s)) is recorded
   as failed with its reason. A deadlock victim is retried (5 times, with jitter) and counted.
3. **report** marks the claimed requests done and records the outcomes per URL.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param, dag

from blobgc.kinds.images import crawler
from blobgc.kinds.images.crawler import CrawlBatchResult
from blobgc.dag_kit import HTTP_POOL, Step, dag_defaults, gc_step, report_run
from blobgc.dag_kit.variables import blob_bucket, crawler_allowed_networks, image_sizes, image_watermark
from demo_app.downloads import DownloadPolicy, fetching
from demo_app.images import image_settings, storer


@dag(
    dag_id="blobgc_crawler",
    schedule=CronTriggerTimetable("*/10 * * * *", timezone="UTC"),
    **dag_defaults("blobgc_crawler"),
    params={
        "requests": Param(None, type=["null", "array"],
                          description='[{"offer_id": int, "urls": [str, ...]}]; empty: the pending app.crawl_request'),
        "cache_days": Param(14, type="integer", minimum=0,
                            description="A URL seen within this many days is never downloaded again."),
        "urls_per_batch": Param(50, type="integer", minimum=1, maximum=1000, description="URLs per crawl_batch."),
        "max_download_mb": Param(20, type="integer", minimum=1, maximum=200,
                                 description="Downloads larger than this are refused (oversize)."),
    },
    tags=["blobgc", "seed-001", "images", "crawler"],
    doc_md=__doc__,
)
def blobgc_crawler():
    @gc_step(checks=(image_sizes, crawler_allowed_networks))
    def stage_requests(step: Step) -> list[int]:
        requests = (crawler.parse_requests(step.params["requests"]) if step.params["requests"] is not None
                    else crawler.claim_pending_requests(step.conn, step.run.run_id))
        return crawler.stage_items(step.conn, step.run.run_id, requests, step.params["urls_per_batch"])

    @gc_step(pool=HTTP_POOL, map_index_template="batch {{ task.op_kwargs['batch_no'] }}")
    def crawl_batch(step: Step, batch_no: int) -> CrawlBatchResult:
        policy = DownloadPolicy(max_bytes=step.params["max_download_mb"] * 1024 * 1024,
                                allowed_networks=crawler_allowed_networks())
        store = storer(step.s3, image_settings(blob_bucket(), image_sizes(), image_watermark()), run_id=step.run.run_id)
        with fetching(policy) as fetch:
            outcomes = crawler.crawl(step.conn, crawler.batch_items(step.conn, step.run.run_id, batch_no), fetch=fetch,
                                     store=store, seen_since=step.cutoff(days=step.params["cache_days"]))
        crawler.record_outcomes(step.conn, step.run.run_id, outcomes)
        return CrawlBatchResult.of(outcomes)

    report_run(summaries={"urls": crawler.finish_crawl}, batches=CrawlBatchResult)(
        batches=crawl_batch.expand(batch_no=stage_requests()))


blobgc_crawler()
