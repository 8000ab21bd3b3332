-- The smallest id, where the walk over id ranges starts (ORDER BY, not min(): any ordered type, uuid too).
SELECT {id}::text FROM {table} ORDER BY {id} LIMIT 1
