-- (DuckDB) Append the headerless CSV file at $path of (key, required), PostgreSQL COPY output, to accounted.
INSERT INTO accounted
SELECT key, required, hash(key)
FROM read_csv($path, header = false, columns = {'key': 'VARCHAR', 'required': 'BOOLEAN'},
              auto_detect = false, sep = ',', quote = '"', escape = '"')
