-- The unfinished items of one batch of a crawler run.
SELECT item_no, offer_id, url, num
FROM blobgc.crawl_item
WHERE run_id = %(run_id)s AND batch_no = %(batch_no)s AND outcome IS NULL
ORDER BY item_no
