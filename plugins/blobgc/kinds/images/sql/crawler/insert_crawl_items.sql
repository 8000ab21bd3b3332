-- Stage a crawler run's items, with the outcome already known for those that cannot be crawled.
INSERT INTO blobgc.crawl_item (run_id, item_no, batch_no, request_id, offer_id, url, url_hash, num, outcome, error,
                               finished_at)
SELECT %(run_id)s, i.item_no, i.batch_no, i.request_id, i.offer_id, i.url, i.url_hash, i.num, i.outcome, i.error,
       CASE WHEN i.outcome IS NULL THEN NULL ELSE now() END
FROM unnest(%(item_nos)s::integer[], %(batch_nos)s::integer[], %(request_ids)s::bigint[], %(offer_ids)s::bigint[],
            %(urls)s::text[], %(url_hashes)s::text[], %(nums)s::smallint[], %(outcomes)s::text[], %(errors)s::text[])
     AS i(item_no, batch_no, request_id, offer_id, url, url_hash, num, outcome, error)
ON CONFLICT (run_id, item_no) DO NOTHING
