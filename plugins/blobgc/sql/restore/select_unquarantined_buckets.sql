-- The buckets where a run deleted objects that no quarantine copy holds (nor held): only a versioned bucket can bring
-- those back.
SELECT DISTINCT d.bucket
FROM blobgc.deleted_object d
WHERE d.dag_id = %(dag_id)s AND d.run_id = %(run_id)s AND NOT d.dry_run AND d.deleted_at IS NOT NULL
  AND (%(sources)s::text[] IS NULL OR d.source = ANY(%(sources)s::text[]))
  AND NOT EXISTS (
      SELECT 1 FROM blobgc.quarantine q
      WHERE q.dag_id = d.dag_id AND q.run_id = d.run_id AND q.bucket = d.bucket AND q.key = d.key)
ORDER BY d.bucket
