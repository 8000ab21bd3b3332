-- A confirmed in-use page usage makes its blob PUBLIC at once (seed 000's BlobPagePoll).
UPDATE app.blob SET visibility = 'PUBLIC' WHERE id = %(blob_id)s AND visibility <> 'PUBLIC'
