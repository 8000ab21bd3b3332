-- The next owed log rows of one DAG and how many keys each still owes (unlocked; claim_owed_deletions locks them).
SELECT o.log_id, cardinality(coalesce(o.keys, l.keys))
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE o.dag_id = %(dag_id)s AND o.log_id > %(after)s
ORDER BY o.log_id
LIMIT 100
