-- The buckets a run deleted from, as it found them: versioning, the rule expiring noncurrent versions (NULL: none),
-- and the bytes its deletions left as noncurrent versions, with when they are freed.
SELECT b.bucket, b.versioning, b.noncurrent_days, b.expired_markers, b.bytes_noncurrent, b.delete_markers,
       b.checked_at,
       CASE WHEN b.noncurrent_days IS NOT NULL
            THEN r.started_at + make_interval(days => b.noncurrent_days + 1) END AS freed_by
FROM blobgc.run_bucket b
JOIN blobgc.run r ON r.dag_id = b.dag_id AND r.run_id = b.run_id
WHERE b.dag_id = %(dag_id)s AND b.run_id = %(run_id)s
ORDER BY b.bucket
