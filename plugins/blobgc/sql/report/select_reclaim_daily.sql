-- Storage reclaimed per day, DAG and dry-run flag since a day, straight from the analysts' view (docs/reference.md §5):
-- bytes reclaimed (gone from storage) beside bytes deleted, the noncurrent versions' bytes and when they are freed.
SELECT day, dag_id, dry_run, runs, rows_deleted, objects_deleted, bytes_reclaimed, bytes_deleted, bytes_noncurrent,
       noncurrent_freed_by
FROM blobgc.reclaim_daily
WHERE day >= %(since)s AND (%(dag_ids)s::text[] IS NULL OR dag_id = ANY(%(dag_ids)s::text[]))
ORDER BY day, dag_id, dry_run;
