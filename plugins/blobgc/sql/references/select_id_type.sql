-- The type of the blob table's id column (as SQL can name it) and its type category, to check extra reference queries against.
SELECT format_type(a.atttypid, a.atttypmod), t.typcategory::text
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = %(target)s::regclass AND a.attname = %(column)s AND a.attnum > 0 AND NOT a.attisdropped
