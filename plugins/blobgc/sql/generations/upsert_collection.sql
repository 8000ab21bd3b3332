-- A collection attempt's start: its scan's figures (the latest attempt's replace earlier ones).
INSERT INTO blobgc.generation_collection AS c
    (dag_id, run_id, generation, dry_run, attempts, false_positive_rate, filter_bytes, references_scanned)
VALUES (%(dag_id)s, %(run_id)s, %(generation)s, false, 1, %(false_positive_rate)s, %(filter_bytes)s,
        %(references_scanned)s)
ON CONFLICT (dag_id, run_id, generation) DO UPDATE
SET attempts = c.attempts + 1, false_positive_rate = excluded.false_positive_rate,
    filter_bytes = excluded.filter_bytes, references_scanned = excluded.references_scanned, finished_at = NULL
