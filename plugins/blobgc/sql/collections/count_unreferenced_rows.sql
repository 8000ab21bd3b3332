-- A dry run before a collection's first real mark (no mark table yet): how many rows of one id range no reference
-- points at (each would be recorded unused).
SELECT count(*), 0
FROM {table} AS t
WHERE (%(lo)s::{type} IS NULL OR t.{id} >= %(lo)s::{type}) AND (%(hi)s::{type} IS NULL OR t.{id} < %(hi)s::{type})
  AND NOT EXISTS (SELECT 1 FROM ({referenced}) AS r WHERE r.blob_id = t.{id})
