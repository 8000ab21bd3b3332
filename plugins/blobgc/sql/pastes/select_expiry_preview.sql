-- What expiring the pastes due before the cutoff would remove: per content, its expired pastes and whether the content would go.
WITH expired AS (
    SELECT content_hash, count(*) AS n
    FROM app.paste
    WHERE status = 'NOT_EXPIRED' AND expires_at < %(expired_before)s
    GROUP BY content_hash
)
SELECT e.content_hash,
       e.n,
       c.ref_count - e.n <= 0 AND NOT EXISTS (
           SELECT 1 FROM app.paste p
           WHERE p.content_hash = e.content_hash
             AND NOT (p.status = 'NOT_EXPIRED' AND p.expires_at < %(expired_before)s)
       ) AS content_goes,
       c.size_bytes
FROM expired e
JOIN app.content c USING (content_hash)
