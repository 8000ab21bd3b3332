-- For each privilege asked for (kind, schema, name, privilege, in order), whether the current role holds it (NULL: no such object), with the object's and the role's names quoted for a GRANT. By oid: no USAGE on a schema is needed to ask about its tables.
SELECT n.i,
       CASE n.kind
           WHEN 'database' THEN has_database_privilege(d.oid, n.privilege)
           WHEN 'schema' THEN has_schema_privilege(s.oid, n.privilege)
           WHEN 'table' THEN has_table_privilege(c.oid, n.privilege)
           WHEN 'sequence' THEN has_sequence_privilege(c.oid, n.privilege)
       END AS held,
       CASE WHEN n.kind IN ('table', 'sequence') THEN quote_ident(n.schema) || '.' || quote_ident(n.name)
            ELSE quote_ident(n.name) END AS shown,
       quote_ident(current_user) AS role
FROM unnest(%(kinds)s::text[], %(schemas)s::text[], %(names)s::text[], %(privileges)s::text[])
     WITH ORDINALITY AS n(kind, schema, name, privilege, i)
LEFT JOIN pg_database d ON n.kind = 'database' AND d.datname = n.name
LEFT JOIN pg_namespace s ON n.kind = 'schema' AND s.nspname = n.name
LEFT JOIN pg_namespace cs ON n.kind IN ('table', 'sequence') AND cs.nspname = n.schema
LEFT JOIN pg_class c ON c.relnamespace = cs.oid AND c.relname = n.name
    AND (c.relkind = 'S') = (n.kind = 'sequence')
ORDER BY n.i
