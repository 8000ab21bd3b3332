-- Add to (or, with replace, set) one part's counts of a dry run's report, moving the run's totals by the same
-- difference; old_rows, old_objects and old_bytes are the part's counts before, read (and locked) by select_part_counts in the same transaction.
WITH part AS (
    INSERT INTO blobgc.run_part AS p (dag_id, run_id, part, rows_deleted, objects_deleted, bytes_reclaimed, collection)
    VALUES (%(dag_id)s, %(run_id)s, %(part)s, %(rows)s, %(objects)s, %(bytes)s, %(collection)s)
    ON CONFLICT (dag_id, run_id, part) DO UPDATE
    SET rows_deleted    = excluded.rows_deleted    + CASE WHEN %(replace)s THEN 0 ELSE p.rows_deleted END,
        objects_deleted = excluded.objects_deleted + CASE WHEN %(replace)s THEN 0 ELSE p.objects_deleted END,
        bytes_reclaimed = excluded.bytes_reclaimed + CASE WHEN %(replace)s THEN 0 ELSE p.bytes_reclaimed END
    RETURNING p.rows_deleted, p.objects_deleted, p.bytes_reclaimed
)
UPDATE blobgc.run r
SET rows_deleted    = r.rows_deleted    + n.rows_deleted    - %(old_rows)s,
    objects_deleted = r.objects_deleted + n.objects_deleted - %(old_objects)s,
    bytes_reclaimed = r.bytes_reclaimed + n.bytes_reclaimed - %(old_bytes)s
FROM part n
WHERE r.dag_id = %(dag_id)s AND r.run_id = %(run_id)s
