-- The application's upload: register a blob whose objects are already stored.
INSERT INTO app.blob (id, filename, mimetype, size_bytes)
VALUES (%(id)s, %(filename)s, %(mimetype)s, %(size_bytes)s)
