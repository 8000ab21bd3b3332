-- Before uploading a new image's files, owe their deletion (an intent): a crash mid-upload leaves them owed, never orphaned.
WITH logged AS (
    INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes)
    VALUES (%(dag_id)s, %(run_id)s, %(source)s, %(bucket)s, %(keys)s::text[], %(sizes)s::bigint[])
    RETURNING id
)
INSERT INTO blobgc.outbox (log_id, dag_id, bucket)
SELECT id, %(dag_id)s, %(bucket)s FROM logged
RETURNING log_id
