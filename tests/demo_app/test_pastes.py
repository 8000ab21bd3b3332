"""demo_app.pastes: seed 002's paste writer."""
from __future__ import annotations


from blobgc.kinds.pastes.layouts import content_key
from demo_app.pastes import content_hash, create_paste
from tests.helpers import object_keys
from tests.support.pastes import FUTURE, ref_count


def test_identical_content_is_stored_once(conn, s3, bucket, redis, redis_prefix):
    a = create_paste(conn, s3, redis, bucket=bucket, content=b"same", expires_at=FUTURE, redis_prefix=redis_prefix)
    b = create_paste(conn, s3, redis, bucket=bucket, content=b"same", expires_at=FUTURE, redis_prefix=redis_prefix)
    assert a.content_hash == b.content_hash == content_hash(b"same")
    assert (a.content_is_new, b.content_is_new) == (True, False)
    assert ref_count(conn, a.content_hash) == 2
    assert object_keys(s3, bucket) == {content_key(a.content_hash)}
    assert redis.get(f"{redis_prefix}{b.short_code}") == b"same"
