-- The mail blob ids, among the given ones, that have a row now: their objects are needed (the outbox's guard).
SELECT blob_id FROM gen.blob WHERE blob_id = ANY(%(ids)s::text[])
