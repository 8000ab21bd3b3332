-- The findings of reconcile run %(run_id)s (select_latest_finding_run): per kind and bucket, with the first keys as
-- a sample. Both read the (run_id, kind, bucket, key) key: a run's findings are counted without being sorted, and no
-- other run's are read. (The run is asked first, in a statement of its own, so that the planner sees its id: as a
-- join's value it was planned as if every finding were that run's, and a page view scanned them all.)
SELECT f.run_id, f.kind, f.bucket, count(*)::bigint AS findings,
       ARRAY(SELECT s.key
             FROM blobgc.reconcile_finding s
             WHERE s.run_id = f.run_id AND s.kind = f.kind AND s.bucket = f.bucket
             ORDER BY s.key
             LIMIT %(sample)s) AS sample_keys
FROM blobgc.reconcile_finding f
WHERE f.run_id = %(run_id)s
GROUP BY f.run_id, f.kind, f.bucket
ORDER BY f.kind, f.bucket;
