-- A plan's size, whole (first column true) and per collection (items without one: NULL): rows, objects, bytes.
SELECT GROUPING(collection) = 1, collection, sum(coalesce(cardinality(row_ids), 0))::bigint,
       sum(cardinality(keys))::bigint, sum(bytes)::bigint
FROM blobgc.plan_item
WHERE dag_id = %(dag_id)s AND run_id = %(plan_run_id)s
GROUP BY GROUPING SETS ((collection), ())
