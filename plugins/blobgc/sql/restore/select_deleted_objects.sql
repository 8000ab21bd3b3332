-- The objects a run deleted, with their delete markers' version ids, that this restore has not dealt with yet.
SELECT DISTINCT ON (d.bucket, d.key) d.bucket, d.key, d.version_id
FROM blobgc.deleted_object d
WHERE d.dag_id = %(dag_id)s AND d.run_id = %(run_id)s AND NOT d.dry_run AND d.deleted_at IS NOT NULL
  AND (%(sources)s::text[] IS NULL OR d.source = ANY(%(sources)s::text[]))
  AND NOT EXISTS (
      SELECT 1 FROM blobgc.restore_item r
      WHERE r.restore_run_id = %(restore_run_id)s AND r.kind = 'object' AND r.bucket = d.bucket AND r.item = d.key)
ORDER BY d.bucket, d.key;
