-- A dry run's view of delete_rows: which of the given rows no reference of any kind points at, with their sizes and
-- the text of the columns their key templates name.
SELECT b.{id}::text, {size}, {key_values}
FROM {table} AS b
WHERE b.{id} = ANY(%(ids)s::text[]::{type}[]) AND {unreferenced}
