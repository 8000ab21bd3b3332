-- Flip app.blob.unused in one key range to match the references found, touching only the rows that change.
-- {referenced} is composed from the discovered foreign keys (blobgc.references); the IN becomes one hashed subplan.
WITH flipped AS (
    UPDATE app.blob b
    SET unused = NOT b.unused,
        updated_at = now()
    WHERE b.id >= %(lo)s AND (%(hi)s::text IS NULL OR b.id < %(hi)s)
      AND b.unused = (b.id IN ({referenced}))
    RETURNING b.unused
)
SELECT count(*) FILTER (WHERE unused) AS became_unused,
       count(*) FILTER (WHERE NOT unused) AS became_used
FROM flipped
