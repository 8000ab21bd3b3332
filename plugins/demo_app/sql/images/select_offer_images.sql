-- Rows bound to an offer or holding one of the given image ids, locked for an attach.
SELECT id, image_id, offer_id, url_hash, body_hash
FROM app.image
WHERE offer_id = %(offer_id)s OR image_id = ANY(%(image_ids)s::text[])
ORDER BY id
FOR UPDATE
