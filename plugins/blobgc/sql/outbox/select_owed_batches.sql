-- The next due owed log rows of one DAG (not parked, past their backoff) and how many keys each still owes (unlocked; claim_owed_deletions locks them).
SELECT o.log_id, cardinality(coalesce(o.keys, l.keys))
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE o.dag_id = %(dag_id)s AND o.log_id > %(after)s
  AND o.parked_at IS NULL AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
ORDER BY o.log_id
LIMIT 100
