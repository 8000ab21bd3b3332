-- Storage reclaimed per day, DAG and dry-run flag since a day for one collection (blobgc.reclaim_daily_by_collection),
-- with the bytes deleted beside the bytes reclaimed.
SELECT day, dag_id, dry_run, runs, rows_deleted, objects_deleted, bytes_reclaimed, collection, bytes_deleted,
       0::bigint AS bytes_noncurrent, NULL::timestamptz AS noncurrent_freed_by
FROM blobgc.reclaim_daily_by_collection
WHERE day >= %(since)s AND collection = %(collection)s
  AND (%(dag_ids)s::text[] IS NULL OR dag_id = ANY(%(dag_ids)s::text[]))
ORDER BY day, dag_id, dry_run;
