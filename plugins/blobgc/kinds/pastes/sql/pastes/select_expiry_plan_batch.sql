-- The next batch of pastes due before the cutoff in a range of content_hash after the keyset position, read without locks (a plan's item).
SELECT short_code, content_hash
FROM app.paste
WHERE status = 'NOT_EXPIRED'
  AND expires_at < %(expired_before)s
  AND content_hash >= %(range_start)s::text AND (%(range_end)s::text IS NULL OR content_hash < %(range_end)s::text)
  AND (content_hash, short_code) > (%(after_hash)s::text, %(after_short_code)s::text)
ORDER BY content_hash, short_code
LIMIT %(batch_size)s
