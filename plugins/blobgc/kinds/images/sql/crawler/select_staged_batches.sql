-- The batches a crawler run staged that still have unfinished items (a retried stage finds them again).
SELECT DISTINCT batch_no FROM blobgc.crawl_item WHERE run_id = %(run_id)s AND outcome IS NULL ORDER BY batch_no
