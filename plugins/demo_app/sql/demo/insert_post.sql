-- Demo data: a post that blobs are attached to.
INSERT INTO app.post (id, title) VALUES (%(id)s, %(title)s) ON CONFLICT (id) DO NOTHING
