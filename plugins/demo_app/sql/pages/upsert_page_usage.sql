-- The application's page poll (seed 000's BlobPagePoll): confirm that a page uses a blob, now.
INSERT INTO app.page_using_blob (blob_id, url, in_use, updated_at)
VALUES (%(blob_id)s, %(url)s, true, now())
ON CONFLICT (blob_id, url) DO UPDATE SET in_use = true, updated_at = now()
