-- The blob ids, among the given ones, that have a row now: their objects are needed (the outbox's guard).
SELECT id FROM app.blob WHERE id = ANY(%(ids)s::text[])
