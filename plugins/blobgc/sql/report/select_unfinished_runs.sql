-- Runs not finished yet, newest first (the reclaim page's runs in progress), of the DAGs given (NULL: every DAG).
SELECT r.dag_id, r.run_id, r.dry_run, r.started_at
FROM blobgc.run r
WHERE r.finished_at IS NULL
  AND (%(dag_ids)s::text[] IS NULL OR r.dag_id = ANY(%(dag_ids)s::text[]))
ORDER BY r.started_at DESC, r.dag_id, r.run_id
LIMIT %(limit)s
