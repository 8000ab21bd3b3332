-- Owe the purge of a batch's cache keys, in the transaction that deletes their rows.
INSERT INTO blobgc.cache_purge (dag_id, run_id, keys) VALUES (%(dag_id)s, %(run_id)s, %(keys)b::text[])
