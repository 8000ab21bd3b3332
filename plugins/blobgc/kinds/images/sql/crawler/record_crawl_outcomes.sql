-- Record what happened to each item of a batch.
UPDATE blobgc.crawl_item c
SET outcome = o.outcome, image_id = o.image_id, error = o.error, finished_at = now()
FROM unnest(%(item_nos)s::integer[], %(outcomes)s::text[], %(image_ids)s::text[], %(errors)s::text[])
     AS o(item_no, outcome, image_id, error)
WHERE c.run_id = %(run_id)s AND c.item_no = o.item_no
