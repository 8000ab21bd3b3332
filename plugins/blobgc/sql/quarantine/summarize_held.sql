-- How many of a DAG's deleted objects are held in quarantine now, and their bytes.
SELECT count(*), coalesce(sum(size_bytes), 0)::bigint
FROM blobgc.quarantine
WHERE dag_id = %(dag_id)s AND purged_at IS NULL AND restored_at IS NULL
