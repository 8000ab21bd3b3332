-- The shards of mail/ that rows fall in.
SELECT DISTINCT left(blob_id, 1) FROM gen.blob
