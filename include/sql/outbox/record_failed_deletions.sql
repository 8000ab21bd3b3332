-- Keep failed deletions owed, with their error, for the next drain to retry.
UPDATE blobgc.outbox o
SET attempts = o.attempts + 1,
    last_error = f.error,
    last_attempt_at = now()
FROM unnest(%(log_ids)s::bigint[], %(errors)s::text[]) AS f(log_id, error)
WHERE o.log_id = f.log_id
