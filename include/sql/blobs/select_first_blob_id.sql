-- The smallest blob id, where the key-range walk starts.
SELECT min(id) FROM app.blob
