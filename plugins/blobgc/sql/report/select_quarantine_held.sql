-- What each DAG's deletions hold in quarantine now, per bucket: objects, bytes, and the next and last expiries.
SELECT dag_id, bucket, count(*) AS objects, coalesce(sum(size_bytes), 0)::bigint AS bytes, min(expires_at) AS next_expiry,
       max(expires_at) AS last_expiry
FROM blobgc.quarantine
WHERE purged_at IS NULL AND restored_at IS NULL
  AND (%(dag_ids)s::text[] IS NULL OR dag_id = ANY(%(dag_ids)s::text[]))
GROUP BY dag_id, bucket
ORDER BY dag_id, bucket
