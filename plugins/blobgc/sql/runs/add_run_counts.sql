-- Add deleted rows, objects and bytes to a run's counters, in the transaction that did the work: bytes reclaimed (gone
-- from storage) and bytes deleted (taken out of the bucket's view: gone, in quarantine, or noncurrent) are two amounts.
UPDATE blobgc.run
SET rows_deleted    = rows_deleted + %(rows)s,
    objects_deleted = objects_deleted + %(objects)s,
    bytes_reclaimed = bytes_reclaimed + %(bytes)s,
    bytes_deleted   = bytes_deleted + %(bytes_deleted)s
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
