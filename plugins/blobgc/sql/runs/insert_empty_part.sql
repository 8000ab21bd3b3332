-- Make sure one part of a dry run's report has a row (zero counts), so that select_part_counts can lock it: two
-- transactions writing a new part at once then read its counts one after the other, never both from nothing.
INSERT INTO blobgc.run_part (dag_id, run_id, part, rows_deleted, objects_deleted, bytes_reclaimed, collection)
VALUES (%(dag_id)s, %(run_id)s, %(part)s, 0, 0, 0, %(collection)s)
ON CONFLICT (dag_id, run_id, part) DO NOTHING
