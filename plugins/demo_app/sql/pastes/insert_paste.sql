-- The write path's paste row, pointing at its (deduplicated) content.
INSERT INTO app.paste (short_code, content_hash, expires_at)
VALUES (%(short_code)s, %(content_hash)s, %(expires_at)s)
