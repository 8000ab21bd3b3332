-- A demo blob row whose object was never stored (reconciliation reports it missing).
INSERT INTO app.blob (id, filename, mimetype, size_bytes) VALUES (%(id)s, 'lost.png', 'image/png', 10)
ON CONFLICT (id) DO NOTHING
