-- Count one DAG's owed object deletions and their bytes.
SELECT count(*), coalesce(sum(l.size_bytes), 0)::bigint, coalesce(max(o.attempts), 0)
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE o.dag_id = %(dag_id)s
