"""blobgc.core.cache_purge: owed Redis keys are deleted in pipelines; a Redis outage leaves them owed."""
from __future__ import annotations


import pytest
import redis as redis_lib

from tests.support.gated import expire_due_pastes
from blobgc.core.cache_purge import CachePurgeError, purge_owed_cache_keys
from demo_app.pastes import create_paste
from tests.helpers import NOW, cached_keys
from tests.support.pastes import FUTURE, PAST, expire_all, new_run


def test_redis_keys_of_expired_pastes_are_deleted_cached_or_not(conn, s3, bucket, redis, redis_prefix):
    cached = [create_paste(conn, s3, redis, bucket=bucket, content=f"c{i}".encode(), expires_at=PAST,
                           redis_prefix=redis_prefix) for i in range(5)]
    never_cached = [create_paste(conn, s3, None, bucket=bucket, content=f"n{i}".encode(), expires_at=PAST)
                    for i in range(3)]
    alive = create_paste(conn, s3, redis, bucket=bucket, content=b"alive", expires_at=FUTURE,
                         redis_prefix=redis_prefix)
    _, _, purged = expire_all(conn, s3, redis, new_run(conn), bucket, redis_prefix)
    assert purged.keys_purged == len(cached) + len(never_cached)
    assert purged.keys_found == len(cached)  # UNLINK of a key that was never cached is a no-op
    assert cached_keys(redis, redis_prefix) == {f"{redis_prefix}{alive.short_code}"}
    assert conn.execute("SELECT count(*) FROM blobgc.cache_purge").fetchone()[0] == 0


def test_redis_down_leaves_the_purge_owed_then_a_retry_completes(conn, s3, bucket, redis, redis_prefix):
    codes = [create_paste(conn, s3, redis, bucket=bucket, content=f"r{i}".encode(), expires_at=PAST,
                          redis_prefix=redis_prefix).short_code for i in range(4)]
    run = new_run(conn)
    expire_due_pastes(conn, run, approved_by="tests", expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    down = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    with pytest.raises(CachePurgeError, match="4 cache keys stay owed"):
        purge_owed_cache_keys(conn, down, run)
    assert conn.execute("SELECT attempts, last_error IS NOT NULL FROM blobgc.cache_purge").fetchall() == [(1, True)]
    assert len(cached_keys(redis, redis_prefix)) == 4

    purged = purge_owed_cache_keys(conn, redis, run)
    assert (purged.keys_purged, purged.keys_owed) == (4, 0)
    assert cached_keys(redis, redis_prefix) == set()
    assert codes


def test_a_redis_cluster_gets_one_unlink_per_hash_slot_and_every_key_goes(conn, tmp_path):
    """A variadic UNLINK across hash slots fails on Redis Cluster (CROSSSLOT): the purge groups by slot."""
    from blobgc.core.cache_purge import owe_cache_purge, unlink_groups
    from blobgc.core.runs import RunRef, ensure_run
    from tests.support.redis_cluster import redis_cluster

    keys = [f"paste-{i}" for i in range(1500)]
    with redis_cluster(tmp_path) as cluster:
        for key in keys[::2]:
            cluster.set(key, b"cached")
        run = ensure_run(conn, RunRef("blobgc_paste_expiry", "cluster-purge"), NOW)
        with conn.transaction():
            owe_cache_purge(conn, run, keys[:1000])
            owe_cache_purge(conn, run, keys[1000:])
        groups = unlink_groups(cluster, keys)
        assert all(len({cluster.keyslot(k) for k in group}) == 1 for group in groups)
        purged = purge_owed_cache_keys(conn, cluster, run)
        assert (purged.keys_purged, purged.keys_found) == (1500, 750)
        assert not any(cluster.exists(key) for key in keys[::2])
    assert conn.execute("SELECT count(*) FROM blobgc.cache_purge").fetchone()[0] == 0


def test_standalone_redis_keeps_one_variadic_unlink_per_1000_keys(redis):
    from blobgc.core.cache_purge import unlink_groups

    assert [len(g) for g in unlink_groups(redis, [f"k{i}" for i in range(2500)])] == [1000, 1000, 500]
