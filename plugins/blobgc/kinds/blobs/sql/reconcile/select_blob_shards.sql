-- The shards of blobs/ that rows fall in (so rows whose objects are all gone are still checked).
SELECT DISTINCT left(id, 1) FROM app.blob
