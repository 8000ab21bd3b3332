-- Which of the named tables (schema-qualified) this database does not have, in the order given. Looked up by name in
-- the catalog, never through to_regclass, which fails on a schema this role may not use: such a table is there (the
-- first task's privilege check names the USAGE the role lacks).
SELECT t.name
FROM unnest(%(names)s::text[]) WITH ORDINALITY AS t(name, n)
CROSS JOIN LATERAL parse_ident(t.name) AS p(parts)
WHERE NOT EXISTS (SELECT 1
                  FROM pg_class c
                  JOIN pg_namespace s ON s.oid = c.relnamespace
                  WHERE cardinality(p.parts) = 2 AND s.nspname = p.parts[1] AND c.relname = p.parts[2])
ORDER BY t.n
