-- Mark one id range of a collection whose mark state blobgc keeps: record the ids that no reference points at in
-- the collection's mark table (stamped with the moment they were first found unused), and forget the ids that are
-- referenced again or whose row is gone. Only ids whose state changes are written.
WITH found AS MATERIALIZED ({found}),
added AS (
    INSERT INTO {marks} (id)
    SELECT id FROM found WHERE unreferenced AND NOT marked
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
),
forgotten AS (
    DELETE FROM {marks} AS m
    WHERE (%(lo)s::{type} IS NULL OR m.id >= %(lo)s::{type}) AND (%(hi)s::{type} IS NULL OR m.id < %(hi)s::{type})
      AND NOT EXISTS (SELECT 1 FROM found AS f WHERE f.id = m.id AND f.unreferenced)
    RETURNING 1
)
SELECT (SELECT count(*) FROM added), (SELECT count(*) FROM forgotten)
