-- Cut the due pastes into parts of about equal size by expires_at: the inner boundaries, for parallel expiry.
SELECT DISTINCT unnest(percentile_disc(%(fractions)s::float8[]) WITHIN GROUP (ORDER BY expires_at)) AS boundary
FROM app.paste
WHERE status = 'NOT_EXPIRED' AND expires_at < %(expired_before)s
ORDER BY boundary
