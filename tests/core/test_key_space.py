"""blobgc.core.key_space: key ranges that cover every blob, from statistics or by walking the index."""
from __future__ import annotations

from blobgc.collectors.mark import mark_in_columns
from blobgc.core.clients import pg_connect
from blobgc.core.key_space import IdColumn, key_ranges
from blobgc.core.references import discover_references
from blobgc.kinds.blobs import bound_app_blob
from tests.helpers import make_blobs
from tests.support.references import covered


def test_key_ranges_from_stale_statistics_still_cover_every_blob(conn, s3, bucket):
    make_blobs(conn, s3, bucket, 300, prefix="m", thumbnails=False)
    conn.execute("ANALYZE app.blob")
    make_blobs(conn, s3, bucket, 5, prefix="0", thumbnails=False)   # sorts before every bound
    make_blobs(conn, s3, bucket, 5, prefix="z", thumbnails=False)   # sorts after every bound
    ranges = key_ranges(conn, 50, IdColumn("app.blob"))
    assert len(ranges) >= 4 and ranges[0][0] is None and ranges[-1][1] is None
    assert covered(conn, ranges) == 310
    result = mark_in_columns(conn, bound_app_blob(""), discover_references(conn, "app.blob"), range_size=50, workers=2,
                               connect=lambda: pg_connect(conn.info.dsn))
    assert result.became_unused == 310


def test_key_ranges_without_statistics_walk_the_index(conn, s3, bucket):
    make_blobs(conn, s3, bucket, 23, thumbnails=False)
    conn.execute("DELETE FROM pg_statistic WHERE starelid = 'app.blob'::regclass")
    ranges = key_ranges(conn, 5, IdColumn("app.blob"))
    assert len(ranges) == 5 and ranges[-1][1] is None
    assert covered(conn, ranges) == 23


def test_key_ranges_cover_a_table_of_uuid_ids_and_an_empty_one(conn):
    """Collections have ids of any ordered type (docs/reference.md §6): uuid has no min(), and a table may be empty."""
    with conn.transaction():
        conn.execute("CREATE TABLE IF NOT EXISTS public.ks_uuid (id uuid PRIMARY KEY)")
        conn.execute("TRUNCATE public.ks_uuid")
    ids = IdColumn("public.ks_uuid", "id", "uuid")
    assert key_ranges(conn, 10, ids) == [(None, None)]
    with conn.transaction():
        conn.execute("INSERT INTO public.ks_uuid SELECT gen_random_uuid() FROM generate_series(1, 95)")
    ranges = key_ranges(conn, 10, ids)
    assert len(ranges) == 10
    covered = sum(conn.execute("SELECT count(*) FROM public.ks_uuid WHERE (%(lo)s::uuid IS NULL OR id >= %(lo)s::uuid) "
                               "AND (%(hi)s::uuid IS NULL OR id < %(hi)s::uuid)", {"lo": lo, "hi": hi}).fetchone()[0]
                  for lo, hi in ranges)
    assert covered == 95
