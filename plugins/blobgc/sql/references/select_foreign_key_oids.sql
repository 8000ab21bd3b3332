-- The oids of the foreign keys that reference the given table, in order: changes when one is added or dropped.
SELECT array_agg(oid::bigint ORDER BY oid)
FROM pg_constraint
WHERE contype = 'f' AND confrelid = %(target)s::regclass AND conparentid = 0
