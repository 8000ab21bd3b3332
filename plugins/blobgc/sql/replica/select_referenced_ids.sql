-- On the read replica: the ids of one id range of a collection that a reference points at (the mark's expensive scan
-- of every referencing table, moved off the primary). `{referenced}` is composed from the discovered foreign keys.
SELECT DISTINCT x.blob_id FROM ({referenced}) AS x
