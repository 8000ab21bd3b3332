-- (DuckDB) View accounted of a part without formed keys: no rows, the columns of its part files.
CREATE OR REPLACE VIEW accounted AS SELECT NULL::VARCHAR AS key, NULL::BOOLEAN AS required WHERE false
