"""blobgc.core.key_space: key ranges that cover every blob, from statistics or by walking the index."""
from __future__ import annotations

from blobgc.collectors.mark import mark_unused_blobs
from blobgc.core.clients import pg_connect
from blobgc.core.key_space import key_ranges
from blobgc.core.references import discover_references
from tests.helpers import make_blobs
from tests.support.references import covered


def test_key_ranges_from_stale_statistics_still_cover_every_blob(conn, s3, bucket):
    make_blobs(conn, s3, bucket, 300, prefix="m", thumbnails=False)
    conn.execute("ANALYZE app.blob")
    make_blobs(conn, s3, bucket, 5, prefix="0", thumbnails=False)   # sorts before every bound
    make_blobs(conn, s3, bucket, 5, prefix="z", thumbnails=False)   # sorts after every bound
    ranges = key_ranges(conn, 50)
    assert len(ranges) >= 4 and ranges[0][0] is None and ranges[-1][1] is None
    assert covered(conn, ranges) == 310
    result = mark_unused_blobs(conn, discover_references(conn), range_size=50, workers=2,
                               connect=lambda: pg_connect(conn.info.dsn))
    assert result.became_unused == 310


def test_key_ranges_without_statistics_walk_the_index(conn, s3, bucket):
    make_blobs(conn, s3, bucket, 23, thumbnails=False)
    conn.execute("DELETE FROM pg_statistic WHERE starelid = 'app.blob'::regclass")
    ranges = key_ranges(conn, 5)
    assert len(ranges) == 5 and ranges[-1][1] is None
    assert covered(conn, ranges) == 23
