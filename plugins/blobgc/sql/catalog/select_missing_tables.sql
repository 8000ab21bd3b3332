-- Which of the named tables (schema-qualified) this database does not have, in the order given.
SELECT name
FROM unnest(%(names)s::text[]) WITH ORDINALITY AS t(name, n)
WHERE to_regclass(name) IS NULL
ORDER BY n
