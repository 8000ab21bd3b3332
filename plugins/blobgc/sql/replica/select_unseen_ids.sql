-- On the primary: the ids of one id range of a collection that the replica found no reference to (`%(seen)s`, the
-- replica's referenced ids). Only these are looked up again on the primary, by id, before the mark records any of
-- them unused: a reference the replica has not replayed yet keeps its row marked used.
SELECT t.{id}
FROM {table} AS t
WHERE (%(lo)s::{type} IS NULL OR t.{id} >= %(lo)s::{type}) AND (%(hi)s::{type} IS NULL OR t.{id} < %(hi)s::{type})
  AND t.{id} <> ALL(%(seen)s::{type}[])
