-- blobgc: no transaction
-- Restore and the reclaim page read the deletion log by source (a collection's objects); on a live database with a
-- long log, the index is built without blocking the collectors' writes. A failed build leaves an invalid index,
-- which the re-run drops first.
DROP INDEX CONCURRENTLY IF EXISTS blobgc.deletion_log_source_idx;
CREATE INDEX CONCURRENTLY deletion_log_source_idx ON blobgc.deletion_log (source, logged_at);
