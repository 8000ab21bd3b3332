-- Cut the due pastes into parts of about equal size by content_hash: the inner boundaries, for parallel planning and expiry.
SELECT DISTINCT unnest(percentile_disc(%(fractions)s::float8[]) WITHIN GROUP (ORDER BY content_hash)) AS boundary
FROM app.paste
WHERE status = 'NOT_EXPIRED' AND expires_at < %(expired_before)s
ORDER BY boundary
