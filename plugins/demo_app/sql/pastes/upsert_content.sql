-- The write path's content row: a new one with ref_count 1, or one more reference to identical content; says which.
INSERT INTO app.content AS c (content_hash, ref_count, size_bytes)
VALUES (%(content_hash)s, 1, %(size_bytes)s)
ON CONFLICT (content_hash) DO UPDATE SET ref_count = c.ref_count + 1
RETURNING (xmax = 0) AS inserted
