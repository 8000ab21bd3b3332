-- Settle a log row whose owed keys S3 all confirmed: drop it from the outbox and record who deleted them.
WITH done AS (
    DELETE FROM blobgc.outbox WHERE log_id = %(log_id)s RETURNING log_id
)
INSERT INTO blobgc.deletion_settlement (log_id, run_id, keys)
SELECT log_id, %(run_id)s, %(keys)b::text[] FROM done
