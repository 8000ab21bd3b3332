-- Claim owed log rows for deletion with their source, the keys (and logged sizes) they still owe, their failures in a
-- row, the LastModified their objects must still be older than (or NULL) and the run that owed them (whose quarantine
-- prefix holds them), skipping rows another worker holds.
SELECT o.log_id, o.bucket, l.source, coalesce(o.keys, l.keys), coalesce(o.sizes, l.sizes), o.failures,
       l.modified_before, l.run_id
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE o.log_id = ANY(%(log_ids)s::bigint[]) AND o.parked_at IS NULL
ORDER BY o.log_id
FOR UPDATE OF o SKIP LOCKED
