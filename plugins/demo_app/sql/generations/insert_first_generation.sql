-- The first reference generation, for a store that has none yet.
INSERT INTO gen.generation (id, created_at) VALUES (1, now()) ON CONFLICT (id) DO NOTHING
