-- Stamp a run finished, merge its report details, and return its totals and whether this is its first finish
-- (a retried report task finishes it again: its metrics must not count twice).
UPDATE blobgc.run r
SET finished_at = now(),
    details = r.details || %(details)s::jsonb
FROM (SELECT finished_at IS NULL AS first FROM blobgc.run
      WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s) before
WHERE r.dag_id = %(dag_id)s AND r.run_id = %(run_id)s
RETURNING r.rows_deleted, r.objects_deleted, r.bytes_reclaimed, before.first
