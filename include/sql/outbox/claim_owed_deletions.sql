-- Claim the next owed object deletions of one DAG, skipping rows another worker holds.
SELECT o.log_id, o.bucket, o.key, l.size_bytes
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE o.dag_id = %(dag_id)s
  AND o.log_id > %(after)s
ORDER BY o.log_id
LIMIT %(batch_size)s
FOR UPDATE OF o SKIP LOCKED
