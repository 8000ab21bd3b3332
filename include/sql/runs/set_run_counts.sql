-- Set a run's counters outright (a dry run's report, computed whole in one transaction, so a retry does not add it twice).
UPDATE blobgc.run
SET rows_deleted = %(rows)s, objects_deleted = %(objects)s, bytes_reclaimed = %(bytes)s
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
