-- Log one batch of objects about to be deleted (with the deleted rows' images, where kept) and, unless this is a dry run, owe all of its keys.
WITH logged AS (
    INSERT INTO blobgc.deletion_log (dag_id, run_id, dry_run, source, bucket, keys, sizes, rows, part, modified_before)
    VALUES (%(dag_id)s, %(run_id)s, %(dry_run)s, %(source)s, %(bucket)s, %(keys)b::text[], %(sizes)b::bigint[],
            %(rows)s::jsonb, %(part)s, %(modified_before)s)
    RETURNING id
)
INSERT INTO blobgc.outbox (log_id, dag_id, bucket)
SELECT id, %(dag_id)s, %(bucket)s
FROM logged
WHERE NOT %(dry_run)s
