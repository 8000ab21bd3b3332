-- A part's plan items this run has not dealt with yet, in order, a page at a time.
SELECT p.id, p.collection, p.source, p.bucket, p.row_ids, p.keys, p.sizes, p.modified_before
FROM blobgc.plan_item p
WHERE p.dag_id = %(dag_id)s AND p.run_id = %(plan_run_id)s AND p.part = %(part)s
  AND p.collection IS NOT DISTINCT FROM %(collection)s
  AND p.id > %(after)s
  AND NOT EXISTS (SELECT 1 FROM blobgc.plan_outcome o
                  WHERE o.dag_id = %(dag_id)s AND o.run_id = %(run_id)s AND o.item_id = p.id)
ORDER BY p.id
LIMIT %(limit)s
