-- The next page of blobs with pending deletions in the generation, walked by keyset within [lo, hi)
-- (the first page of a range includes its lower bound).
SELECT DISTINCT blob_id
FROM gen.deletion
WHERE generation = %(generation)s
  AND blob_id >= %(after)s AND (%(inclusive)s OR blob_id <> %(after)s)
  AND (%(hi)s::text IS NULL OR blob_id < %(hi)s)
ORDER BY blob_id
LIMIT %(limit)s
