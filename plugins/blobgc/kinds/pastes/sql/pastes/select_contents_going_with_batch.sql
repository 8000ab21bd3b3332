-- Of a planned batch's contents, those it takes to ref_count 0: every paste of theirs is due before the cutoff, none after the batch's last (content_hash, short_code).
SELECT c.content_hash, c.size_bytes
FROM app.content c
WHERE c.content_hash = ANY(%(hashes)s::text[])
  AND c.ref_count <= (SELECT count(*) FROM app.paste p WHERE p.content_hash = c.content_hash)
  AND NOT EXISTS (
      SELECT 1 FROM app.paste p
      WHERE p.content_hash = c.content_hash
        AND NOT (p.status = 'NOT_EXPIRED' AND p.expires_at < %(expired_before)s
                 AND (p.content_hash, p.short_code) <= (%(last_hash)s::text, %(last_short_code)s::text)))
ORDER BY c.content_hash
