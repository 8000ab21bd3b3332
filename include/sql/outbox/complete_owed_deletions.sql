-- Settle deletions S3 confirmed: stamp the log and drop them from the outbox.
WITH done AS (
    DELETE FROM blobgc.outbox
    WHERE log_id = ANY(%(log_ids)s)
    RETURNING log_id
)
UPDATE blobgc.deletion_log l
SET deleted_at = now(), deleted_by_run_id = %(run_id)s
FROM done
WHERE l.id = done.log_id
