-- How many blobs a generation holds: the capacity of its bloom filter (no more distinct blobs can be referenced).
SELECT count(*) FROM gen.blob WHERE generation = %(generation)s
