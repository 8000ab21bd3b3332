-- Settle cache purges that Redis confirmed.
DELETE FROM blobgc.cache_purge WHERE id = ANY(%(ids)s::bigint[])
