-- Content hashes in a shard's range [lo, hi), which must each have an object.
SELECT content_hash, NULL::text[] FROM app.content
WHERE content_hash >= %(shard_lo)s AND content_hash < %(shard_hi)s AND content_hash >= coalesce(%(lo)s::text, '')
  AND (%(hi)s::text IS NULL OR content_hash < %(hi)s)
ORDER BY content_hash
