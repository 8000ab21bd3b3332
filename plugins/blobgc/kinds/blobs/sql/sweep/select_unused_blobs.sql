-- The next batch of blobs in one id range that have been unused since before the cutoff (and created before it, when the collection names created_at), in id order (only the plan's ids, when given); the locking clause, when present, claims them with FOR UPDATE SKIP LOCKED.
SELECT id, size_bytes
FROM app.blob AS t
WHERE unused
  AND updated_at < %(cutoff)s
  AND {created_before}
  AND (%(after)s::text IS NULL OR id > %(after)s)
  AND (%(lo)s::text IS NULL OR id >= %(lo)s)
  AND (%(hi)s::text IS NULL OR id < %(hi)s)
  AND (%(plan_ids)s::text[] IS NULL OR id = ANY(%(plan_ids)s::text[]))
ORDER BY id
LIMIT %(batch_size)s
{locking}
