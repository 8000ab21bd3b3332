-- Keep the keys S3 refused owed, with their errors; record the confirmed ones as settled.
WITH kept AS (
    UPDATE blobgc.outbox
    SET keys = %(failed_keys)b::text[],
        sizes = %(failed_sizes)b::bigint[],
        attempts = attempts + 1,
        last_errors = %(errors)s::jsonb,
        last_attempt_at = now()
    WHERE log_id = %(log_id)s
    RETURNING log_id
)
INSERT INTO blobgc.deletion_settlement (log_id, run_id, keys)
SELECT log_id, %(run_id)s, %(done_keys)b::text[] FROM kept WHERE cardinality(%(done_keys)b::text[]) > 0
