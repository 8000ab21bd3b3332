-- Log objects about to be deleted and, unless this is a dry run, owe their deletion in the outbox.
WITH logged AS (
    INSERT INTO blobgc.deletion_log (dag_id, run_id, dry_run, source, bucket, key, size_bytes)
    SELECT %(dag_id)s, %(run_id)s, %(dry_run)s, %(source)s, %(bucket)s, k.key, k.size_bytes
    FROM unnest(%(keys)s::text[], %(sizes)s::bigint[]) AS k(key, size_bytes)
    RETURNING id, bucket, key
)
INSERT INTO blobgc.outbox (log_id, dag_id, bucket, key)
SELECT id, %(dag_id)s, bucket, key
FROM logged
WHERE NOT %(dry_run)s
