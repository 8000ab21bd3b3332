-- (DuckDB) View inventory of a part without report keys: no rows, the columns of its part files.
CREATE OR REPLACE VIEW inventory AS SELECT NULL::VARCHAR AS key, NULL::BIGINT AS size, NULL::BIGINT AS modified_ms WHERE false
