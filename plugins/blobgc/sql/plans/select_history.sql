-- The median rows, objects and bytes (deleted: what a plan's bytes become, whether or not storage frees them yet) of
-- the DAG's last real runs that finished (and whose gate did not refuse them), for the whole DAG (collection NULL)
-- and each collection (runs without that collection's figures count as 0).
WITH last_runs AS (
    SELECT r.run_id, r.rows_deleted, r.objects_deleted, r.bytes_deleted
    FROM blobgc.run r
    WHERE r.dag_id = %(dag_id)s AND NOT r.dry_run AND r.finished_at IS NOT NULL AND r.run_id <> %(run_id)s
      AND NOT EXISTS (SELECT 1 FROM blobgc.gate_decision g WHERE g.dag_id = r.dag_id AND g.run_id = r.run_id
                      AND g.decision IN ('rejected', 'timed_out'))
    ORDER BY r.started_at DESC
    LIMIT %(history)s
), per_collection AS (
    SELECT c.collection, l.run_id, coalesce(rc.rows_deleted, 0) AS n_rows, coalesce(rc.objects_deleted, 0) AS objects,
           coalesce(rc.bytes_deleted, 0) AS bytes
    FROM last_runs l
    CROSS JOIN unnest(%(collections)s::text[]) AS c(collection)
    LEFT JOIN blobgc.run_collection rc ON rc.dag_id = %(dag_id)s AND rc.run_id = l.run_id
                                       AND rc.collection = c.collection
)
SELECT NULL::text, count(*)::int, percentile_cont(0.5) WITHIN GROUP (ORDER BY objects_deleted),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY bytes_deleted),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY rows_deleted)
FROM last_runs
UNION ALL
SELECT collection, count(*)::int, percentile_cont(0.5) WITHIN GROUP (ORDER BY objects),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY bytes), percentile_cont(0.5) WITHIN GROUP (ORDER BY n_rows)
FROM per_collection
GROUP BY collection
