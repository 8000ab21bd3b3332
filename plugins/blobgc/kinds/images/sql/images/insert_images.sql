-- Insert image rows for existing files, each only if a row with its image_id still exists; returns what was inserted.
INSERT INTO app.image (image_id, offer_id, url_hash, body_hash, num, last_update)
SELECT n.image_id, n.offer_id, n.url_hash, n.body_hash, n.num, now()
FROM unnest(%(image_ids)s::text[], %(offer_ids)s::bigint[], %(url_hashes)s::text[], %(body_hashes)s::text[],
            %(nums)s::smallint[]) AS n(image_id, offer_id, url_hash, body_hash, num)
WHERE NOT %(require_existing)s OR EXISTS (SELECT 1 FROM app.image i WHERE i.image_id = n.image_id)
RETURNING id, image_id, offer_id
