-- Keep cache purges owed after Redis failed, with the error, for the next attempt.
UPDATE blobgc.cache_purge
SET attempts = attempts + 1, last_error = %(error)s, last_attempt_at = now()
WHERE id = ANY(%(ids)s::bigint[])
