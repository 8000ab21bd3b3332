-- A dry run's view of delete_rows: which of the given rows no reference of any kind points at, with their sizes and
-- the keys their templates form.
SELECT b.{id}::text, {size}, {keys}
FROM {table} AS b
WHERE b.{id} = ANY(%(ids)s::text[]::{type}[]) AND {unreferenced}
