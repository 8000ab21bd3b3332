-- Lock a DAG's quarantine copies not yet purged in one bucket for a purge (a copy already restored to its key is
-- purged too, but its bytes were never reclaimed), skipping those an undo holds.
SELECT id, quarantine_key, size_bytes, days, source, restored_at IS NOT NULL AS restored
FROM blobgc.quarantine
WHERE dag_id = %(dag_id)s AND bucket = %(bucket)s AND purged_at IS NULL
ORDER BY id
FOR UPDATE SKIP LOCKED
