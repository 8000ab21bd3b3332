-- Settle one claimed log row: keys S3 refused stay owed with their errors, the row goes once none is left, and who deleted (with the delete markers' version ids on a versioned bucket) or kept which keys is recorded.
WITH still_owed AS (
    UPDATE blobgc.outbox
    SET keys = %(failed_keys)b::text[],
        sizes = %(failed_sizes)b::bigint[],
        attempts = attempts + 1,
        last_errors = %(errors)s::jsonb,
        last_attempt_at = now()
    WHERE log_id = %(log_id)s AND cardinality(%(failed_keys)b::text[]) > 0
    RETURNING log_id
), settled AS (
    DELETE FROM blobgc.outbox
    WHERE log_id = %(log_id)s AND cardinality(%(failed_keys)b::text[]) = 0
    RETURNING log_id
)
INSERT INTO blobgc.deletion_settlement (log_id, run_id, keys, outcome, version_ids)
SELECT %(log_id)s, %(run_id)s, k.keys, k.outcome, k.version_ids
FROM (VALUES (%(done_keys)b::text[], 'deleted', %(done_versions)s::text[]),
             (%(kept_keys)b::text[], 'kept', NULL::text[])) AS k(keys, outcome, version_ids)
WHERE cardinality(k.keys) > 0
