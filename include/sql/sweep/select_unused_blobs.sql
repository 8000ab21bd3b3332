-- The next batch of one shard's blobs unused since before the cutoff, in (updated_at, id) order; the locking clause, when present, claims them with FOR UPDATE SKIP LOCKED.
SELECT id, size_bytes, updated_at
FROM app.blob
WHERE unused
  AND updated_at < %(cutoff)s
  AND (updated_at, id) > (%(after_ts)s, %(after_id)s)
  AND (%(shards)s = 1 OR (hashtext(id) & 2147483647) %% %(shards)s = %(shard)s)
ORDER BY updated_at, id
LIMIT %(batch_size)s
{locking}
