-- Claim and delete the planned rows that are still unbound and untouched since before the cutoff, skipping rows others hold.
DELETE FROM app.image
WHERE id = ANY (ARRAY(
    SELECT id FROM app.image
    WHERE id = ANY(%(ids)s::bigint[]) AND offer_id IS NULL AND last_update < %(cutoff)s
    ORDER BY id
    FOR UPDATE SKIP LOCKED
))
RETURNING id, image_id
