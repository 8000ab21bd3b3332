-- (DuckDB) Table inventory of a Parquet report's current objects ($has_*: the version columns it has).
CREATE OR REPLACE TABLE inventory AS
SELECT key, CAST(size AS BIGINT) AS size, epoch_ms(last_modified_date) AS modified_ms, hash(key) AS h
FROM (
    SELECT * FROM inventory_files
    UNION ALL BY NAME
    SELECT NULL::BOOLEAN AS is_latest, NULL::BOOLEAN AS is_delete_marker WHERE false
) AS files
WHERE (NOT $has_is_latest OR coalesce(is_latest, true))
  AND NOT ($has_is_delete_marker AND coalesce(is_delete_marker, false))
