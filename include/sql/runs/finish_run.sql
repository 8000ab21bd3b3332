-- Stamp a run finished, merge its report details, and return its totals.
UPDATE blobgc.run
SET finished_at = now(),
    details = details || %(details)s::jsonb
WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s
RETURNING rows_deleted, objects_deleted, bytes_reclaimed
