-- Take back one part's dry-run report (a retried task writes it again): its log rows, its counts, and their share of the run's totals.
WITH logged AS (
    DELETE FROM blobgc.deletion_log
    WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND dry_run AND part = %(part)s
    RETURNING id
), part AS (
    DELETE FROM blobgc.run_part
    WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND part = %(part)s
    RETURNING rows_deleted, objects_deleted, bytes_reclaimed
)
UPDATE blobgc.run r
SET rows_deleted = r.rows_deleted - p.rows_deleted,
    objects_deleted = r.objects_deleted - p.objects_deleted,
    bytes_reclaimed = r.bytes_reclaimed - p.bytes_reclaimed
FROM part p, (SELECT count(*) FROM logged) AS gone
WHERE r.dag_id = %(dag_id)s AND r.run_id = %(run_id)s
