-- Reconcile from S3 Inventory (issue 19): an orphan found in an inventory report is judged by the report's
-- LastModified, hours old. Its log row carries the run's cut-off, and the drain, just before deleting, asks the
-- store for the object's LastModified now: one written again since (its row may be on its way) is kept, one
-- deleted since is settled as absent. NULL (every other source): the listing's LastModified was fresh.
ALTER TABLE blobgc.deletion_log ADD COLUMN modified_before timestamptz;
