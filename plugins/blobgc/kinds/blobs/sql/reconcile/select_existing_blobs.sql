-- Which of the given blob ids have a row.
SELECT id FROM app.blob WHERE id = ANY(%(refs)s::text[])
