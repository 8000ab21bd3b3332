-- Generation blob ids in a shard's range [lo, hi), which must each have an object.
SELECT blob_id, NULL::text[] FROM gen.blob
WHERE blob_id >= %(shard_lo)s AND blob_id < %(shard_hi)s AND blob_id >= coalesce(%(lo)s::text, '')
  AND (%(hi)s::text IS NULL OR blob_id < %(hi)s)
ORDER BY blob_id
