-- (DuckDB) Table inventory of a CSV report's current objects, keys URL-decoded ($has_*: the version fields it has).
CREATE OR REPLACE TABLE inventory AS
SELECT key, size, modified_ms, hash(key) AS h
FROM (
    SELECT TRY(url_decode(replace("Key", '+', ' '))) AS key,
           TRY_CAST("Size" AS BIGINT) AS size,
           epoch_ms(TRY_CAST("LastModifiedDate" AS TIMESTAMP)) AS modified_ms,
           "IsLatest",
           "IsDeleteMarker"
    FROM (
        SELECT * FROM inventory_files
        UNION ALL BY NAME
        SELECT NULL::VARCHAR AS "IsLatest", NULL::VARCHAR AS "IsDeleteMarker" WHERE false
    ) AS files
) AS objects
WHERE (NOT $has_is_latest OR "IsLatest" = 'true')
  AND NOT ($has_is_delete_marker AND "IsDeleteMarker" = 'true')
