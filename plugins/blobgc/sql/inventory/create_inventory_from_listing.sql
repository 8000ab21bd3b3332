-- (DuckDB) Table inventory of a GCS or Azure report's current objects, one row a key ($name_prefix: Azure's "container/").
CREATE OR REPLACE TABLE inventory AS
SELECT key, arg_max(size, coalesce(modified_ms, -1)) AS size, max(modified_ms) AS modified_ms, hash(key) AS h
FROM (
    SELECT substr(key, length($name_prefix) + 1) AS key,
           TRY_CAST(size AS BIGINT) AS size,
           coalesce(modified_ms,
                    epoch_ms(TRY_CAST(modified_text AS TIMESTAMPTZ)),
                    epoch_ms(try_strptime(modified_text, '%a, %d %b %Y %H:%M:%S GMT'))) AS modified_ms
    FROM inventory_files
    WHERE starts_with(key, $name_prefix) AND length(key) > length($name_prefix)
      AND coalesce(lower(is_current), 'true') = 'true'
      AND coalesce(lower(deleted), 'false') <> 'true'
      AND coalesce(snapshot, '') = ''
      AND coalesce(lower(folder), 'false') <> 'true'
) AS objects
GROUP BY key
