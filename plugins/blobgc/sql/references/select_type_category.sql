-- The name and category of a result column's type (an extra reference query must return the blob id's type).
SELECT format_type(%(oid)s::oid, NULL), typcategory::text FROM pg_type WHERE oid = %(oid)s::oid
