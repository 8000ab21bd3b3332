-- (DuckDB) Table accounted, empty: the keys the rows form, whether each must exist, and the hash that parts it.
CREATE OR REPLACE TABLE accounted (key VARCHAR, required BOOLEAN, h UBIGINT)
