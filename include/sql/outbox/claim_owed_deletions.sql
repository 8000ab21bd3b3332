-- Claim owed log rows for deletion with their source and the keys they still owe, skipping rows another worker holds.
SELECT o.log_id, o.bucket, l.source, coalesce(o.keys, l.keys), coalesce(o.sizes, l.sizes)
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE o.log_id = ANY(%(log_ids)s::bigint[])
ORDER BY o.log_id
FOR UPDATE OF o SKIP LOCKED
