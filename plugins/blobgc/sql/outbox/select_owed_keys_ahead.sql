-- The keys, logged sizes and buckets that the next due owed log rows of one DAG still owe, unlocked: what a drain lists ahead of its claims to learn in bulk which objects exist, and their sizes.
SELECT o.log_id, o.bucket, coalesce(o.keys, l.keys), coalesce(o.sizes, l.sizes), l.modified_before IS NOT NULL
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE o.dag_id = %(dag_id)s AND o.log_id >= %(first)s
  AND o.parked_at IS NULL AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
ORDER BY o.log_id
LIMIT %(rows)s
