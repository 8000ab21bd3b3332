-- Reconcile's checkpoint columns named for what they hold (issue 31). pending_ref has held an inventory part's
-- phase since issue 19 ('leftovers': the report's keys no row forms; 'lacking': the keys rows must have that the
-- report lacks), NULL for a listed shard; before that it held a listed page's pending row id, which no run resumes
-- from any more (cleared here). pending_keys has held nothing since then (always empty) and goes.
ALTER TABLE blobgc.reconcile_checkpoint RENAME COLUMN pending_ref TO inventory_phase;
ALTER TABLE blobgc.reconcile_checkpoint DROP COLUMN pending_keys;
UPDATE blobgc.reconcile_checkpoint SET inventory_phase = NULL WHERE inventory_phase NOT IN ('leftovers', 'lacking');
ALTER TABLE blobgc.reconcile_checkpoint
    ADD CONSTRAINT reconcile_checkpoint_inventory_phase CHECK (inventory_phase IN ('leftovers', 'lacking'));
