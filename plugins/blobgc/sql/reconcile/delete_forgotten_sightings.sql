-- Forget a batch of sightings older than the previous pass (keys no pass since found orphaned); rows another task
-- holds are skipped (its page moves them to its own pass).
DELETE FROM blobgc.reconcile_sighting
WHERE (bucket, key) IN (SELECT bucket, key FROM blobgc.reconcile_sighting WHERE pass < %(previous)s
                        LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
