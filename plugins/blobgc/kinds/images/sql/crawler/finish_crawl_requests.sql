-- Mark the requests a crawler run claimed as done.
UPDATE app.crawl_request SET status = 'done', finished_at = now() WHERE status = 'claimed' AND claimed_by = %(run_id)s
