-- How many items a crawler run has staged (0: not staged yet).
SELECT count(*) FROM blobgc.crawl_item WHERE run_id = %(run_id)s
