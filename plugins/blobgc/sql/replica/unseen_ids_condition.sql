-- A condition on a referencing column `{c}` (scope "unseen" of blobgc.core.references.referenced_ids_query): it
-- points at one of the rows the read replica found no reference to, listed once by replica/referenced_ids_rechecked
-- (its `unseen` CTE).
{c} = ANY((SELECT unseen.ids FROM unseen)::{t}[])
