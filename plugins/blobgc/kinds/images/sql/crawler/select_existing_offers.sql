-- Which of the given offer ids exist.
SELECT id FROM app.offer WHERE id = ANY(%(ids)s::bigint[])
