-- The blob id at a position among the generation's pending deletions: a cut between two walks.
SELECT blob_id FROM gen.deletion WHERE generation = %(generation)s ORDER BY blob_id OFFSET %(offset)s LIMIT 1
