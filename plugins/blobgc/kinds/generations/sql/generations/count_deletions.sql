-- How many deletions a generation has pending (to cut it into ranges for parallel walks).
SELECT count(*) FROM gen.deletion WHERE generation = %(generation)s
