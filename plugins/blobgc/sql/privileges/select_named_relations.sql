-- The relations some names in a query may mean (schema and name; a NULL schema: the first schema of the role's search path that has it), those that exist, with the schema they are in.
SELECT DISTINCT ON (q.i) q.i, n.nspname, c.relname
FROM unnest(%(schemas)s::text[], %(names)s::text[]) WITH ORDINALITY AS q(schema, name, i)
JOIN pg_class c ON c.relname = q.name AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN unnest(current_schemas(true)) WITH ORDINALITY AS p(schema, position) ON p.schema = n.nspname
WHERE (q.schema IS NOT NULL AND n.nspname = q.schema) OR (q.schema IS NULL AND p.position IS NOT NULL)
ORDER BY q.i, p.position
