-- Of the given contents, those no paste references (orphans), with their sizes.
SELECT c.content_hash, c.size_bytes
FROM app.content c
WHERE c.content_hash = ANY(%(hashes)s::text[])
  AND NOT EXISTS (SELECT 1 FROM app.paste p WHERE p.content_hash = c.content_hash)
ORDER BY c.content_hash
