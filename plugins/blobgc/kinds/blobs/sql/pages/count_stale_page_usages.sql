-- Dry run of delete_stale_page_usages: how many page usages are not confirmed since the cutoff.
SELECT count(*) FROM app.page_using_blob WHERE updated_at < %(cutoff)s
