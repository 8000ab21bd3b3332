-- Every row for the given URL hashes, oldest first, with when each was last touched (the cache window is applied by the caller).
SELECT id, image_id, offer_id, url_hash, body_hash, last_update
FROM app.image
WHERE url_hash = ANY(%(url_hashes)s::text[])
ORDER BY id
