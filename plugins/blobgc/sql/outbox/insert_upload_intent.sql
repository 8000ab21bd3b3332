-- Before uploading a new image's files, owe their deletion (an intent): a crash mid-upload leaves them owed, never orphaned.
-- The intent is due only after the hold (longer than an upload), so no drain claims it while its writer still uploads.
WITH logged AS (
    INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes)
    VALUES (%(dag_id)s, %(run_id)s, %(source)s, %(bucket)s, %(keys)s::text[], %(sizes)s::bigint[])
    RETURNING id
)
INSERT INTO blobgc.outbox (log_id, dag_id, bucket, next_attempt_at)
SELECT id, %(dag_id)s, %(bucket)s, now() + %(hold)s::interval FROM logged
RETURNING log_id
