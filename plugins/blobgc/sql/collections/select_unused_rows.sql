-- The next batch of a collection's rows in one id range that have been unused since before the cutoff (and, when
-- the collection names a created_at column, created before it too), in id order (only the plan's ids, when given); the locking clause, when
-- present, claims the rows with FOR UPDATE SKIP LOCKED (a writer adding a reference holds KEY SHARE: skipped).
SELECT m.id::text
FROM {marks} AS m
JOIN {table} AS t ON t.{id} = m.id
WHERE m.unused_since < %(cutoff)s
  AND {created_before}
  AND (%(after)s::{type} IS NULL OR m.id > %(after)s::{type})
  AND (%(lo)s::{type} IS NULL OR m.id >= %(lo)s::{type})
  AND (%(hi)s::{type} IS NULL OR m.id < %(hi)s::{type})
  AND (%(plan_ids)s::text[] IS NULL OR m.id = ANY(%(plan_ids)s::text[]::{type}[]))
  -- the same bounds on the collection's side of the join: without them a merge join reads the table's id index from
  -- its first row up to the batch's, on every batch (quadratic: 400k index rows read for a batch 400k rows in)
  AND (%(after)s::{type} IS NULL OR t.{id} > %(after)s::{type})
  AND (%(lo)s::{type} IS NULL OR t.{id} >= %(lo)s::{type})
  AND (%(hi)s::{type} IS NULL OR t.{id} < %(hi)s::{type})
ORDER BY m.id
LIMIT %(batch_size)s
{locking}
