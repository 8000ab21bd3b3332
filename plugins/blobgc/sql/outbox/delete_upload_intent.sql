-- The image's row is in: its files are no longer owed, and the intent was never a deletion.
WITH unowed AS (DELETE FROM blobgc.outbox WHERE log_id = %(log_id)s RETURNING log_id)
DELETE FROM blobgc.deletion_log WHERE id = %(log_id)s
