-- Blobs found referenced at delete time are in use again: clear the flag and stamp the flip.
UPDATE app.blob
SET unused = false, updated_at = now()
WHERE id = ANY(%(ids)b::text[]) AND unused
