-- For each row of one id range of a collection: is it referenced now, and does its mark table hold it? NULL-safe:
-- the referenced ids (blobgc.core.references) never include NULL and are matched by a join, never by `IN (subquery)`.
SELECT t.{id} AS id, r.blob_id IS NULL AS unreferenced, m.id IS NOT NULL AS marked
FROM {table} AS t
LEFT JOIN (SELECT DISTINCT x.blob_id FROM ({referenced}) AS x) AS r ON r.blob_id = t.{id}
LEFT JOIN {marks} AS m ON m.id = t.{id}
WHERE (%(lo)s::{type} IS NULL OR t.{id} >= %(lo)s::{type}) AND (%(hi)s::{type} IS NULL OR t.{id} < %(hi)s::{type})
