-- The row images a run's log holds for one source that this restore has not dealt with yet: each one's bucket, restore
-- item and id, and the keys it forms, computed in SQL by the templates' expressions over the image read back as a row.
SELECT l.bucket, %(table)s::text || ' ' || r.{id}::text AS item, r.{id}::text AS id, x.image,
       array_remove({keys}, NULL) AS keys
FROM blobgc.deletion_log l
CROSS JOIN LATERAL jsonb_array_elements(l.rows) AS x(image)
CROSS JOIN LATERAL jsonb_populate_record(NULL::{table}, x.image) AS r
WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND l.source = %(source)s
  AND l.rows IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM blobgc.restore_item ri
      WHERE ri.restore_run_id = %(restore_run_id)s AND ri.kind = 'row'
        AND ri.item = %(table)s::text || ' ' || r.{id}::text)
ORDER BY l.id
