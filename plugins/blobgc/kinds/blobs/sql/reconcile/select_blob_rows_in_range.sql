-- Blob ids in a shard's id range [lo, hi), which must each have an object.
SELECT id, NULL::text[] FROM app.blob
WHERE id >= %(shard_lo)s AND id < %(shard_hi)s AND id >= coalesce(%(lo)s::text, '')
  AND (%(hi)s::text IS NULL OR id < %(hi)s)
ORDER BY id
