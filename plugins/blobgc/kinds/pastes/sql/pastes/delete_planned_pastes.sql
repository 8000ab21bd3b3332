-- Claim and delete a plan item's pastes that are still NOT_EXPIRED and due before the plan's cutoff, skipping rows another run holds.
DELETE FROM app.paste
WHERE short_code = ANY (ARRAY(
    SELECT short_code
    FROM app.paste
    WHERE short_code = ANY(%(codes)s::text[])
      AND status = 'NOT_EXPIRED'
      AND expires_at < %(expired_before)s
    ORDER BY short_code
    FOR UPDATE SKIP LOCKED
))
RETURNING short_code, content_hash
