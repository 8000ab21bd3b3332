-- The buckets where a DAG has quarantine copies not yet purged.
SELECT DISTINCT bucket
FROM blobgc.quarantine
WHERE dag_id = %(dag_id)s AND purged_at IS NULL
ORDER BY bucket
