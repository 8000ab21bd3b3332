-- The blobgc runs recorded since a moment, for the demo's reclaim summary.
SELECT dag_id, run_id, dry_run, rows_deleted, objects_deleted, bytes_reclaimed
FROM blobgc.run
WHERE started_at >= %(since)s
ORDER BY started_at
