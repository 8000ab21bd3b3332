-- Hold content hashes whose object is about to be deleted: an uncommitted row makes a writer of the same content wait; returns the hashes held (the others exist again).
INSERT INTO app.content (content_hash, ref_count)
SELECT h, 0 FROM unnest(%(hashes)b::text[]) AS h ORDER BY h
ON CONFLICT (content_hash) DO NOTHING
RETURNING content_hash
