-- Settle one claimed log row: keys that failed stay owed with their errors (backing off, or parked, after failures no
-- retry can fix), the row goes once none is left, and which keys were deleted (with the sizes the store reported and, on
-- a versioned bucket, the delete markers' version ids), kept or found absent, by which run, is recorded.
WITH still_owed AS (
    UPDATE blobgc.outbox
    SET keys = %(failed_keys)b::text[],
        sizes = %(failed_sizes)b::bigint[],
        attempts = attempts + 1,
        failures = %(failures)s,
        next_attempt_at = CASE WHEN %(backoff)s::interval > interval '0' THEN now() + %(backoff)s::interval END,
        parked_at = CASE WHEN %(park)s THEN now() END,
        last_errors = %(errors)s::jsonb,
        last_attempt_at = now()
    WHERE log_id = %(log_id)s AND cardinality(%(failed_keys)b::text[]) > 0
    RETURNING log_id
), settled AS (
    DELETE FROM blobgc.outbox
    WHERE log_id = %(log_id)s AND cardinality(%(failed_keys)b::text[]) = 0
    RETURNING log_id
)
INSERT INTO blobgc.deletion_settlement (log_id, run_id, keys, outcome, version_ids, sizes)
SELECT %(log_id)s, %(run_id)s, k.keys, k.outcome, k.version_ids, k.sizes
FROM (VALUES (%(done_keys)b::text[], 'deleted', %(done_versions)b::text[], %(done_sizes)b::bigint[]),
             (%(kept_keys)b::text[], 'kept', NULL::text[], NULL::bigint[]),
             (%(absent_keys)b::text[], 'absent', NULL::text[], NULL::bigint[])) AS k(keys, outcome, version_ids, sizes)
WHERE cardinality(k.keys) > 0
