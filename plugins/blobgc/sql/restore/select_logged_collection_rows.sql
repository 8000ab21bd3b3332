-- The row images a run's log holds for one collection's source, with the keys of that source the run deleted and
-- this restore has not brought back (a row is put back only when all of its deleted objects are back).
SELECT (SELECT coalesce(jsonb_agg(r.image), '[]'::jsonb)
        FROM blobgc.deletion_log l
        CROSS JOIN LATERAL jsonb_array_elements(l.rows) AS r(image)
        WHERE l.dag_id = %(dag_id)s AND l.run_id = %(run_id)s AND NOT l.dry_run AND l.source = %(source)s
          AND l.rows IS NOT NULL) AS images,
       (SELECT coalesce(array_agg(DISTINCT d.key), '{}')
        FROM blobgc.deleted_object d
        WHERE d.dag_id = %(dag_id)s AND d.run_id = %(run_id)s AND NOT d.dry_run AND d.deleted_at IS NOT NULL
          AND d.source = %(source)s
          AND NOT EXISTS (
              SELECT 1 FROM blobgc.restore_item ri
              WHERE ri.restore_run_id = %(restore_run_id)s AND ri.kind = 'object' AND ri.bucket = d.bucket
                AND ri.item = d.key AND ri.outcome IN ('restored', 'already_restored'))) AS not_back
