-- The shards of images/ that rows fall in ("3f/").
SELECT DISTINCT left(image_id, 2) || '/' FROM app.image
