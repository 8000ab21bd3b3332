-- Demo data: blobs that an earlier marking pass found unused some time ago.
UPDATE app.blob SET unused = true, updated_at = now() - %(age)s::interval, created_at = now() - %(age)s::interval
WHERE id = ANY(%(ids)s::text[])
