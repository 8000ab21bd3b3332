-- Quarantine copies brought back to their keys by a restore: the purge deletes them later without counting them.
UPDATE blobgc.quarantine
SET restored_at = now(), restored_by_run_id = %(restore_run_id)s
WHERE id = ANY(%(ids)s::bigint[])
