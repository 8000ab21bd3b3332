-- Which of the given content hashes have a row.
SELECT content_hash FROM app.content WHERE content_hash = ANY(%(refs)s::text[])
