-- Storage reclaimed per day, DAG and dry-run flag since a day, straight from the analysts' view (docs/reference.md §5).
SELECT day, dag_id, dry_run, runs, rows_deleted, objects_deleted, bytes_reclaimed
FROM blobgc.reclaim_daily
WHERE day >= %(since)s AND (%(dag_ids)s::text[] IS NULL OR dag_id = ANY(%(dag_ids)s::text[]))
ORDER BY day, dag_id, dry_run;
