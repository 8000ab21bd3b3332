-- Which of the given image ids have a row.
SELECT DISTINCT image_id FROM app.image WHERE image_id = ANY(%(refs)s::text[])
