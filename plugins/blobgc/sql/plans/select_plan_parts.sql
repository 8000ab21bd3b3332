-- The parts of a plan (collection and part), in the order they were planned.
SELECT collection, part, count(*) AS items
FROM blobgc.plan_item
WHERE dag_id = %(dag_id)s AND run_id = %(plan_run_id)s
GROUP BY collection, part
ORDER BY min(id)
