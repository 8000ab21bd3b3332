-- Delete the given contents whose ref_count reached 0 and that no paste references any more.
DELETE FROM app.content c
WHERE c.content_hash = ANY(%(hashes)b::text[])
  AND c.ref_count <= 0
  AND NOT EXISTS (SELECT 1 FROM app.paste p WHERE p.content_hash = c.content_hash)
RETURNING c.content_hash, c.size_bytes
