-- A demo offer.
INSERT INTO app.offer (id, title) VALUES (%(id)s, %(title)s) ON CONFLICT (id) DO NOTHING
