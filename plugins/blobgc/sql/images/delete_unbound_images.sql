-- Claim and delete the next batch of unbound rows older than the cutoff after the keyset id, skipping rows others hold.
DELETE FROM app.image
WHERE id = ANY (ARRAY(
    SELECT id FROM app.image
    WHERE offer_id IS NULL AND last_update < %(cutoff)s AND id > %(after)s
    ORDER BY id
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
))
RETURNING id, image_id
