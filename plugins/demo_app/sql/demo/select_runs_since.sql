-- The blobgc runs recorded since a moment, for the demo's reclaim summary: bytes deleted, and bytes reclaimed (gone
-- from storage).
SELECT dag_id, run_id, dry_run, rows_deleted, objects_deleted,
       CASE WHEN dry_run THEN bytes_reclaimed ELSE bytes_deleted END, bytes_reclaimed
FROM blobgc.run
WHERE started_at >= %(since)s
ORDER BY started_at
