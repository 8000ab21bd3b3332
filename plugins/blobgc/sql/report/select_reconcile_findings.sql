-- The findings of the latest reconcile run that has any: per kind and bucket, with the first keys as a sample.
WITH latest AS (
    SELECT f.run_id
    FROM blobgc.reconcile_finding f
    ORDER BY f.found_at DESC, f.id DESC
    LIMIT 1
)
SELECT f.run_id, f.kind, f.bucket, count(*)::bigint AS findings,
       (array_agg(f.key ORDER BY f.key))[1:%(sample)s] AS sample_keys
FROM blobgc.reconcile_finding f
JOIN latest USING (run_id)
GROUP BY f.run_id, f.kind, f.bucket
ORDER BY f.kind, f.bucket;
