-- The last runs of each DAG and dry-run flag, newest first, for the real-next-to-dry comparison.
SELECT dag_id, dry_run, run_id, started_at, finished_at, rows_deleted, objects_deleted, bytes_reclaimed,
       details
FROM (
    SELECT r.*, row_number() OVER (PARTITION BY r.dag_id, r.dry_run ORDER BY r.started_at DESC) AS nth
    FROM blobgc.run r
    WHERE %(dag_ids)s::text[] IS NULL OR r.dag_id = ANY(%(dag_ids)s::text[])
) ranked
WHERE nth <= %(per_dag)s
ORDER BY dag_id, dry_run, started_at DESC;
