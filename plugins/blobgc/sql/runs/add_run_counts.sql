-- Add deleted rows, objects and bytes to a run's counters, in the transaction that did the work.
UPDATE blobgc.run
SET rows_deleted    = rows_deleted + %(rows)s,
    objects_deleted = objects_deleted + %(objects)s,
    bytes_reclaimed = bytes_reclaimed + %(bytes)s
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
