-- The blobgc runs a restore's run_id (and optional DAG id) names, with their dry-run flag.
SELECT dag_id, run_id, dry_run
FROM blobgc.run
WHERE run_id = %(run_id)s
  AND (%(dag_id)s::text IS NULL OR dag_id = %(dag_id)s::text)
  AND dag_id <> 'blobgc_restore'
ORDER BY dag_id;
