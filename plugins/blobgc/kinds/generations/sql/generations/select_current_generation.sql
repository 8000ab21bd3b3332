-- The current reference generation (NULL before the first), and the isolation level the writer runs at.
SELECT max(id), current_setting('transaction_isolation') FROM gen.generation
