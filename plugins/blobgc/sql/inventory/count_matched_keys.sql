-- (DuckDB) A part's report keys that some row forms: accounted for without a live look-up (all but its leftovers).
SELECT (SELECT count(*) FROM inventory) - (SELECT count(*) FROM differences WHERE in_report)
