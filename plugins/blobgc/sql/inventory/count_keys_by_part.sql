-- (DuckDB) Each part's (h % $parts) keys in the report and keys the rows form: what each part's files must hold.
SELECT part, sum(inventory)::BIGINT, sum(accounted)::BIGINT
FROM (
    SELECT h % CAST($parts AS UBIGINT) AS part, 1 AS inventory, 0 AS accounted FROM inventory
    UNION ALL
    SELECT h % CAST($parts AS UBIGINT) AS part, 0 AS inventory, 1 AS accounted FROM accounted
) AS keys
GROUP BY part
