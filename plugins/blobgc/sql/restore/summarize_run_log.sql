-- What a run deleted: the buckets of its deleted objects, how many were deleted, how many are still owed, how many row images its log holds.
SELECT array_agg(DISTINCT d.bucket ORDER BY d.bucket) FILTER (WHERE d.deleted_at IS NOT NULL) AS buckets,
       count(*) FILTER (WHERE d.deleted_at IS NOT NULL)                                    AS deleted,
       count(*) FILTER (WHERE d.owed)                                                      AS owed,
       (SELECT coalesce(sum(jsonb_array_length(l.rows)), 0)
        FROM blobgc.deletion_log l
        WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND l.rows IS NOT NULL
          AND (%(sources)s::text[] IS NULL OR l.source = ANY(%(sources)s::text[]))) AS rows_logged
FROM blobgc.deleted_object d
WHERE d.dag_id = %(dag_id)s AND d.run_id = %(run_id)s AND NOT d.dry_run
  AND (%(sources)s::text[] IS NULL OR d.source = ANY(%(sources)s::text[]));
