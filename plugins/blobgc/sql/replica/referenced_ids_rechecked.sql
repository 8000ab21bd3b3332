-- The mark's referenced ids when it reads a read replica (blobgc.collectors.mark.referenced_source): the ids of one id
-- range that the replica found referenced (`%(seen)s`), and those of the range's other rows that a reference on the
-- primary points at, looked up by id (rechecked). Part of the mark's own statement on the primary, so one
-- snapshot covers the look-up and the marks it decides: a reference the replica has not replayed yet keeps its row
-- used. The range's other rows are listed once (MATERIALIZED), not once per referencing table.
WITH unseen AS MATERIALIZED (
    SELECT ARRAY(
        SELECT u.{id} FROM {blobs} AS u
        WHERE (%(lo)s::{t} IS NULL OR u.{id} >= %(lo)s::{t}) AND (%(hi)s::{t} IS NULL OR u.{id} < %(hi)s::{t})
          AND u.{id} <> ALL(%(seen)s::{t}[])
    ) AS ids
)
SELECT unnest(%(seen)s::{t}[]) AS blob_id
UNION ALL
{rechecked}
