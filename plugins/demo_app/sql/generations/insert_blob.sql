-- A blob of the current generation, unless this generation already has it (deduplication). Returns a row only when new.
INSERT INTO gen.blob (blob_id, generation, size_bytes)
VALUES (%(blob_id)s, %(generation)s, %(size_bytes)s)
ON CONFLICT (blob_id) DO NOTHING
RETURNING true
