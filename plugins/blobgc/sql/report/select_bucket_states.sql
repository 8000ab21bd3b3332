-- Each bucket as the latest real run that deleted from it found it: versioning, the rule expiring noncurrent versions
-- (NULL: none), and the noncurrent bytes blobgc's deletions left there over the window.
SELECT DISTINCT ON (b.bucket) b.bucket, b.versioning, b.noncurrent_days, b.expired_markers, b.checked_at,
       (SELECT coalesce(sum(x.bytes_noncurrent), 0)::bigint FROM blobgc.run_bucket x
        WHERE x.bucket = b.bucket AND x.checked_at >= %(since)s
          AND (%(dag_ids)s::text[] IS NULL OR x.dag_id = ANY(%(dag_ids)s::text[]))) AS bytes_noncurrent,
       (SELECT coalesce(sum(x.delete_markers), 0)::bigint FROM blobgc.run_bucket x
        WHERE x.bucket = b.bucket AND x.checked_at >= %(since)s
          AND (%(dag_ids)s::text[] IS NULL OR x.dag_id = ANY(%(dag_ids)s::text[]))) AS delete_markers
FROM blobgc.run_bucket b
WHERE (%(dag_ids)s::text[] IS NULL OR b.dag_id = ANY(%(dag_ids)s::text[]))
ORDER BY b.bucket, b.checked_at DESC
