-- Object deletions still owed, per DAG and bucket: keys, bytes, the oldest, the most attempts, how many are parked, and a last error.
SELECT o.dag_id, o.bucket,
       count(*)::bigint                                                     AS log_rows,
       sum(cardinality(coalesce(o.keys, l.keys)))::bigint                   AS objects,
       sum((SELECT coalesce(sum(s), 0) FROM unnest(coalesce(o.sizes, l.sizes)) s))::bigint AS bytes,
       min(o.created_at)                                                    AS oldest,
       max(o.attempts)                                                      AS max_attempts,
       coalesce(sum(cardinality(coalesce(o.keys, l.keys))) FILTER (WHERE o.parked_at IS NOT NULL), 0)::bigint AS parked,
       (array_agg(o.last_errors::text ORDER BY o.last_attempt_at DESC NULLS LAST))[1] AS last_errors
FROM blobgc.outbox o
JOIN blobgc.deletion_log l ON l.id = o.log_id
WHERE %(dag_ids)s::text[] IS NULL OR o.dag_id = ANY(%(dag_ids)s::text[])
GROUP BY o.dag_id, o.bucket
ORDER BY o.dag_id, o.bucket;
