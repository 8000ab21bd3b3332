-- Runs newest first, with the collections each touched: the reclaim page's most recent (no dag_id given), or one run's receipt.
SELECT r.dag_id, r.run_id, r.dry_run, r.reference_time, r.started_at, r.finished_at, r.rows_deleted,
       r.objects_deleted, r.bytes_reclaimed, r.bytes_deleted, r.plan_run_id, r.reads, r.replica_lag_seconds,
       ARRAY(SELECT rc.collection FROM blobgc.run_collection rc WHERE rc.dag_id = r.dag_id AND rc.run_id = r.run_id
             UNION
             SELECT rp.collection FROM blobgc.run_part rp
             WHERE rp.dag_id = r.dag_id AND rp.run_id = r.run_id AND rp.collection IS NOT NULL
             ORDER BY 1) AS collections
FROM blobgc.run r
WHERE (%(dag_id)s::text IS NULL OR (r.dag_id = %(dag_id)s AND r.run_id = %(run_id)s))
  AND (%(dag_ids)s::text[] IS NULL OR r.dag_id = ANY(%(dag_ids)s::text[]))
ORDER BY r.started_at DESC, r.dag_id, r.run_id
LIMIT %(limit)s;
