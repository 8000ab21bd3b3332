-- Dry run of update_marks: how many ids of one id range would be recorded unused, and how many forgotten.
WITH found AS MATERIALIZED ({found})
SELECT (SELECT count(*) FROM found WHERE unreferenced AND NOT marked),
       (SELECT count(*) FROM {marks} AS m
        WHERE (%(lo)s::{type} IS NULL OR m.id >= %(lo)s::{type}) AND (%(hi)s::{type} IS NULL OR m.id < %(hi)s::{type})
          AND NOT EXISTS (SELECT 1 FROM found AS f WHERE f.id = m.id AND f.unreferenced))
