-- The application attaches a blob to a post (the seed's BlobAttachment m:n row).
INSERT INTO app.blob_attachment (blob_id, post_id)
VALUES (%(blob_id)s, %(post_id)s)
ON CONFLICT (post_id, blob_id) DO NOTHING
