-- Take back one part's dry-run report (a retried task writes it again): its counts, and their share of the run's totals. (Its plan items, the report's keys, are taken back by the plan store.)
WITH part AS (
    DELETE FROM blobgc.run_part
    WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s AND part = %(part)s
    RETURNING rows_deleted, objects_deleted, bytes_reclaimed
)
UPDATE blobgc.run r
SET rows_deleted = r.rows_deleted - p.rows_deleted,
    objects_deleted = r.objects_deleted - p.objects_deleted,
    bytes_reclaimed = r.bytes_reclaimed - p.bytes_reclaimed
FROM part p
WHERE r.dag_id = %(dag_id)s AND r.run_id = %(run_id)s
