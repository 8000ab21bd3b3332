-- An owner's reference to a blob (storing the same content twice for one owner is one reference).
INSERT INTO gen.reference (owner_id, blob_id, generation)
VALUES (%(owner_id)s, %(blob_id)s, %(generation)s)
ON CONFLICT (owner_id, blob_id) DO NOTHING
