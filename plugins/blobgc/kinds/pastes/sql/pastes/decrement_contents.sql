-- Decrement each of the batch's contents once, by its number of claimed pastes.
UPDATE app.content c
SET ref_count = c.ref_count - claimed.n
FROM unnest(%(hashes)b::text[], %(counts)b::integer[]) AS claimed(content_hash, n)
WHERE c.content_hash = claimed.content_hash
  AND c.content_hash = ANY(%(hashes)b::text[])
RETURNING c.content_hash, c.ref_count, c.size_bytes
