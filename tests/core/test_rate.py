"""The delete-rate cap (blobgc.core.rate): Variable blobgc_rate_limits, and token buckets in the stack's Redis."""

from __future__ import annotations

import multiprocessing
import time
import uuid

import pytest

from blobgc.core.rate import REDIS_PREFIX, CappedStore, RateCap, RateLimits
from blobgc.core.settings import ConfigurationError
from tests.helpers import bulk_put


def test_rate_limits_pick_the_longest_prefix_then_the_bucket_then_the_default_for_each_bucket():
    limits = RateLimits.parse({"default": 3000, "media": 1000, "media/thumbs/": 200, "media/thumbs/big/": 50})
    assert limits.entry("media", "thumbs/big/1.jpg") == ("media/thumbs/big/", 50)
    assert limits.entry("media", "thumbs/1.jpg") == ("media/thumbs/", 200)
    assert limits.entry("media", "raw/1.jpg") == ("media", 1000)
    assert limits.entry("other", "x") == ("other", 3000)  # the default caps each other bucket on its own
    assert RateLimits.parse({"media": 10}).entry("other", "x") is None
    assert not RateLimits.parse(None) and RateLimits.parse(None).entry("media", "x") is None


@pytest.mark.parametrize(("value", "message"), [
    ([1, 2], "must be a JSON object of bucket"),
    ({"media": 0}, r"'media' -> 0 is not a number of deletes per second above 0"),
    ({"media": "fast"}, r"'media' -> 'fast' is not a number"),
    ({"media": True}, r"'media' -> True is not a number"),
    ({"/thumbs/": 5}, "names no bucket"),
])
def test_a_malformed_rate_limits_variable_is_refused_naming_it(value, message):
    with pytest.raises(ConfigurationError, match=r"Variable blobgc_rate_limits.*" + message):
        RateLimits.parse(value)


def take_for(bucket: str, rate: float, seconds: float, stamps) -> None:
    """A worker of its own (a process): take 10 tokens at a time for `seconds`, noting when each call went."""
    from blobgc.core.clients import redis_from_env

    cap = RateCap(redis_from_env(), RateLimits.parse({bucket: rate}))
    end = time.time() + seconds
    while time.time() < end:
        cap.take(bucket, [f"k{i}" for i in range(10)])
        stamps.append(time.time())


@pytest.mark.parametrize("rate", [200, 500])
def test_two_processes_taking_from_one_cap_stay_within_its_rate(redis, rate):
    """Two processes (two workers) share one cap through Redis: together they stay within the rate, and both get
    a share. Measured over the run: the calls after the first, each of 10 keys, over the time they took."""
    bucket = f"cap-{uuid.uuid4().hex[:8]}"
    with multiprocessing.Manager() as manager:
        stamps = [manager.list(), manager.list()]
        workers = [multiprocessing.Process(target=take_for, args=(bucket, rate, 3.0, s)) for s in stamps]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        calls = sorted(t for s in stamps for t in s)
        shares = [len(s) for s in stamps]
    redis.delete(REDIS_PREFIX + bucket)
    measured = (len(calls) - 1) * 10 / (calls[-1] - calls[0])
    assert rate * 0.9 <= measured <= rate * 1.1, (measured, rate)
    assert min(shares) > 0.3 * sum(shares), shares


def test_a_slowdown_halves_the_rate_once_a_second_then_it_recovers(redis):
    bucket = f"cap-{uuid.uuid4().hex[:8]}"
    cap = RateCap(redis, RateLimits.parse({bucket: 100}), hold_s=2.0, recovery_per_s=1.0)
    assert cap.rate_now(bucket) == 100
    cap.slowed(bucket, ["a"])
    cap.slowed(bucket, ["b"])  # the same episode: other workers saw it too
    assert float(redis.hget(REDIS_PREFIX + bucket, "factor")) == 0.5  # halved once, held for 2 s
    assert cap.rate_now(bucket) == pytest.approx(50, abs=1)
    waited = cap.take(bucket, ["x"] * 5)  # within the burst (0.1 s of the rate): at once
    assert waited == 0
    waited = cap.take(bucket, ["y"] * 10)  # waits for its own tokens at the halved rate, less the burst
    assert waited == pytest.approx((5 + 10) / 50 - 0.1, abs=0.03)  # 0.2 s; at the full rate it would be 0.05
    time.sleep(2.0 + 0.6)  # the hold, then 1.0 of the rate a second: back to the full rate
    assert cap.rate_now(bucket) == pytest.approx(100, abs=1)
    redis.delete(REDIS_PREFIX + bucket)


def client_retrying(retries: int):
    """A client of the local S3 server as blobgc makes them, retrying a failed call `retries` times (standard mode)."""
    import os

    import boto3
    from botocore.config import Config

    from blobgc.core.clients import S3_CONFIG

    return boto3.client("s3", endpoint_url=os.environ["BLOBGC_S3_ENDPOINT"], region_name="us-east-1",
                        config=S3_CONFIG.merge(Config(retries={"max_attempts": retries, "mode": "standard"})))


class Answers:
    """A store answering DeleteObjects with the errors `refusing` names (SlowDown for some keys), counting calls."""

    def __init__(self, refusing: dict[str, str]) -> None:
        self.refusing, self.calls = refusing, []

    def delete_objects(self, *, Bucket, Delete):  # noqa: N803
        keys = [o["Key"] for o in Delete["Objects"]]
        self.calls.append(("delete_objects", Bucket, keys))
        return {"Errors": [{"Key": k, "Code": self.refusing[k]} for k in keys if k in self.refusing]}

    def list_objects_v2(self, **kwargs):
        self.calls.append(("list_objects_v2", kwargs["Bucket"], []))
        return {}


def test_a_capped_store_takes_a_token_per_key_and_slows_down_on_a_keys_slowdown(redis):
    bucket = f"cap-{uuid.uuid4().hex[:8]}"
    waits: list[float] = []
    cap = RateCap(redis, RateLimits.parse({bucket: 1000}), sleep=waits.append)
    store = Answers({"k3": "SlowDown"})
    capped = CappedStore(store, cap)
    capped.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"k{i}"} for i in range(500)]})
    capped.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"k{i}"} for i in range(10)]})
    capped.list_objects_v2(Bucket=bucket)  # not a per-object call: passes through, no token
    assert [c[0] for c in store.calls] == ["delete_objects", "delete_objects", "list_objects_v2"]
    assert cap.taken.calls == 2
    # each call waited for its own tokens (less the burst): 500 at 1000/s, then 10 more at the halved rate
    assert waits == [pytest.approx(0.5 - 0.1, abs=0.05), pytest.approx(0.5 + 10 / 500 - 0.1, abs=0.05)]
    assert cap.rate_now(bucket) == pytest.approx(500, abs=5)  # k3's SlowDown halved the cap
    redis.delete(REDIS_PREFIX + bucket)


def test_the_local_servers_slowdown_hook_answers_slowdown_to_deletes_copies_and_heads_only(s3, bucket):
    """POST /_blobgc/slowdown?bucket=B&count=N (docs/reference.md §1): the next N per-object calls on B answer 503
    SlowDown; listings and PUTs pass; other buckets are untouched; count=0 clears it."""
    from botocore.exceptions import ClientError

    from tests.helpers import s3_slowdown

    plain = client_retrying(0)
    s3.put_object(Bucket=bucket, Key="a", Body=b"a")
    assert s3_slowdown(bucket, 4) == 4
    plain.put_object(Bucket=bucket, Key="b", Body=b"b")  # not a per-object call of the hook: passes
    plain.list_objects_v2(Bucket=bucket)
    calls = [lambda: plain.head_object(Bucket=bucket, Key="a"),
             lambda: plain.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "a"}),
             lambda: plain.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a"}]}),
             lambda: plain.delete_object(Bucket=bucket, Key="a")]
    for call in calls:
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert refused.value.response["Error"]["Code"] in ("SlowDown", "503")  # a HEAD's answer has no body
    plain.head_object(Bucket=bucket, Key="a")  # the four are spent
    s3_slowdown(bucket, 100)
    s3_slowdown(bucket, 0)
    plain.head_object(Bucket=bucket, Key="a")


def test_a_drain_under_slowdown_loses_nothing_and_its_cap_falls_then_recovers(conn, s3, bucket, redis):
    """The store answers SlowDown past botocore's retries: the keys stay owed (failed, for the next drain), the cap
    on the bucket is halved, and once the store recovers a second drain deletes them all; the rate recovers."""
    from botocore.exceptions import ClientError

    from blobgc.core.outbox import delete_owed_objects
    from tests.core.test_outbox import FAST, new_run, owe
    from tests.helpers import object_keys, s3_slowdown

    keys = [f"slow/{i:04d}" for i in range(300)]
    bulk_put(bucket, [(k, 10) for k in keys])
    run = new_run(conn, "slowdown")
    owe(conn, run, bucket, keys, [10] * len(keys))
    store = client_retrying(1)
    cap = RateCap(redis, RateLimits.parse({bucket: 2000}), hold_s=2.0, recovery_per_s=1.0)
    s3_slowdown(bucket, 1000)  # every attempt of this drain
    try:
        with pytest.raises(ClientError, match="SlowDown"):  # raised once all else was drained: the task retries
            delete_owed_objects(conn, CappedStore(store, cap), run, policy=FAST, batch_size=100, concurrency=1)
    finally:
        s3_slowdown(bucket, 0)
    assert object_keys(s3, bucket) == set(keys)
    assert cap.taken.calls >= 2  # botocore's retry of the throttled call took its tokens again
    # halved once per episode: the throttled attempt and botocore's retry of it are one episode, or two when the
    # retry came more than a second later (a loaded machine)
    assert float(redis.hget(REDIS_PREFIX + bucket, "factor")) in (0.5, 0.25)
    owed = conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE owed AND run_id = %s",
                        (run.run_id,)).fetchone()[0]
    assert owed == len(keys)
    time.sleep(2.0 + 0.8)  # the hold, then 1.0 of the rate a second: back to its configured value from 0.25
    assert cap.rate_now(bucket) == pytest.approx(2000, rel=0.01)
    second = delete_owed_objects(conn, CappedStore(store, cap), run, policy=FAST, batch_size=100, concurrency=1)
    assert second.objects_deleted == len(keys) and second.failed == 0
    assert object_keys(s3, bucket) == set()
    redis.delete(REDIS_PREFIX + bucket)


def test_a_drains_claim_under_a_cap_holds_about_two_seconds_of_its_lowest_rate(redis):
    """A claim's transaction holds its rows while their calls wait for tokens: under a cap it takes fewer keys."""
    from blobgc.core.outbox import claim_size

    capped = CappedStore(Answers({}), RateCap(redis, RateLimits.parse({"default": 3000, "media/thumbs/": 200})))
    assert claim_size(capped, 4000) == 400  # 2 s of the lowest rate, 200/s
    assert claim_size(CappedStore(Answers({}), RateCap(redis, RateLimits.parse({"m": 10}))), 4000) == 100  # at least
    assert claim_size(CappedStore(Answers({}), RateCap(redis, RateLimits.parse({"m": 9000}))), 4000) == 4000
    assert claim_size(Answers({}), 4000) == 4000  # no cap


def test_a_capped_delete_is_cut_into_calls_of_half_a_second_of_its_rate_and_answers_as_one(redis):
    bucket = f"cap-{uuid.uuid4().hex[:8]}"
    store = Answers({"k7": "AccessDenied"})
    capped = CappedStore(store, RateCap(redis, RateLimits.parse({bucket: 100}), sleep=lambda _: None))
    answer = capped.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"k{i}"} for i in range(120)],
                                                          "Quiet": True})
    assert [len(keys) for _, _, keys in store.calls] == [50, 50, 20]
    assert answer["Errors"] == [{"Key": "k7", "Code": "AccessDenied"}]
    redis.delete(REDIS_PREFIX + bucket)


def test_redis_unreachable_sends_nothing_and_fails_the_call_as_transient():
    import redis as redis_module

    from blobgc.core.objects import is_transient
    from blobgc.core.rate import CapUnavailable

    gone = redis_module.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)  # nothing listens there
    store = Answers({})
    capped = CappedStore(store, RateCap(gone, RateLimits.parse({"b": 100})))
    with pytest.raises(CapUnavailable) as failed:
        capped.delete_objects(Bucket="b", Delete={"Objects": [{"Key": "k"}]})
    assert store.calls == [] and is_transient(failed.value)
    assert "could not take its tokens from Redis" in str(failed.value)
