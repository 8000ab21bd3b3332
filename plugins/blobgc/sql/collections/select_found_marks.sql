-- For each row of one id range of a collection: is it referenced now, and does its mark table hold it? NULL-safe:
-- the referenced ids (blobgc.core.references) never include NULL and are matched by a join, never by `IN (subquery)`.
SELECT t.{id} AS id, r.blob_id IS NULL AS unreferenced, m.id IS NOT NULL AS marked
FROM {table} AS t
LEFT JOIN (SELECT DISTINCT x.blob_id FROM ({referenced}) AS x) AS r ON r.blob_id = t.{id}
-- the range's bounds on the mark table too: the planner does not carry them over the join, and without them every range
-- reads the whole mark table (a seq scan of 3M marks for each range of 100k rows at 10M rows: quadratic)
LEFT JOIN {marks} AS m ON m.id = t.{id}
    AND (%(lo)s::{type} IS NULL OR m.id >= %(lo)s::{type}) AND (%(hi)s::{type} IS NULL OR m.id < %(hi)s::{type})
WHERE (%(lo)s::{type} IS NULL OR t.{id} >= %(lo)s::{type}) AND (%(hi)s::{type} IS NULL OR t.{id} < %(hi)s::{type})
