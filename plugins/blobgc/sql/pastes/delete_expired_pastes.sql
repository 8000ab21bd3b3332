-- Claim and delete the next batch of expired pastes in a range of expires_at after the keyset position, skipping rows another run holds.
DELETE FROM app.paste
WHERE short_code = ANY (ARRAY(
    SELECT short_code
    FROM app.paste
    WHERE status = 'NOT_EXPIRED'
      AND expires_at < %(expired_before)s
      AND expires_at >= %(range_start)s::timestamptz AND expires_at < %(range_end)s::timestamptz
      AND (expires_at, short_code) > (%(after_expires_at)s::timestamptz, %(after_short_code)s::text)
    ORDER BY expires_at, short_code
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
))
RETURNING short_code, content_hash, expires_at
