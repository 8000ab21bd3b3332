"""A delete-rate cap shared by every worker: one token bucket per bucket (or bucket/prefix) in Redis.

S3 allows about 3,500 deletes a second per partitioned prefix and answers 503 SlowDown past it, throttling the
application's own writes to that prefix with blobgc's. Variable `blobgc_rate_limits` (JSON) caps blobgc's
per-object calls: bucket, or `bucket/prefix`, -> calls per second across all workers, and `"default"` for every
other bucket (each bucket its own). Unset: no cap (botocore's adaptive retry mode still backs off a client that is
throttled). The calls capped are the ones blobgc repeats per object: each key of a DeleteObjects call, each HEAD
before a deletion, each copy (and each part of a multipart copy) into quarantine.

Every worker takes its tokens from the same state in Redis, atomically (one Lua script: a reservation in the manner
of GCRA, each call pushing the bucket's "theoretical arrival time" on by n / rate and waiting until then, less a
burst of `BURST_S`), so mapped tasks and Celery workers together hold the rate, whatever their number: by any
moment, the calls sent since the cap was last idle are at most rate × (the time since + `BURST_S`). A DeleteObjects
call is cut into calls of at most `CHUNK_S` of its cap's rate, and botocore's own retries of a throttled call take
their tokens again. A SlowDown (or 503) answer halves
the capped rate (at most once a second, however many workers saw it), holds it there for `HOLD_S`, then recovers it
by `RECOVERY_PER_S` of the configured rate a second: additive increase, multiplicative decrease. The state expires
from Redis a day after its last use.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from blobgc.core.objects import chunked, listing_client
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

VARIABLE = "blobgc_rate_limits"
REDIS_PREFIX = "blobgc:rate:"
BURST_S = 0.1  # how far ahead of its turn a call may go: the rate over a run overshoots by at most this much
DECREASE = 0.5  # a SlowDown multiplies the rate by this ...
FLOOR = 1 / 64  # ... never below this share of the configured rate
CUT_EVERY_S = 1.0  # SlowDowns within a second of a cut are one episode: one cut
HOLD_S = 10.0  # no recovery for this long after a cut
RECOVERY_PER_S = 0.02  # then the rate grows by this share of the configured rate a second (0.5 -> 1 in 25 s)
STATE_TTL_S = 86_400
CLAIM_S = 2.0  # a drain's claim under a cap holds about this many seconds of the lowest rate
CHUNK_S = 0.5  # a DeleteObjects call under a cap holds at most this many seconds of its rate
SLOWDOWN_CODES = frozenset(
    {
        "SlowDown",
        "503",
        "ServiceUnavailable",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "429",
    }
)

# KEYS[1]: the entry's state (a hash: tat, factor, since, cut). ARGV: configured rate, n, burst, recovery a second.
# Returns {seconds to wait, the rate now} as strings.
TAKE = """
local base, n, burst, recovery = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'tat', 'factor', 'since')
local factor = tonumber(s[2]) or 1
local since = tonumber(s[3]) or now
if factor < 1 and now > since then
  factor = math.min(1, factor + recovery * (now - since))
  since = now
end
local rate = base * factor
local tat = tonumber(s[1]) or now
if tat < now then tat = now end
tat = tat + n / rate
local wait = tat - burst - now
if wait < 0 then wait = 0 end
redis.call('HSET', KEYS[1], 'tat', string.format('%.6f', tat), 'factor', string.format('%.9f', factor),
           'since', string.format('%.6f', since))
redis.call('EXPIRE', KEYS[1], ARGV[5])
return {string.format('%.6f', wait), string.format('%.6f', rate)}
"""

# KEYS[1]: the entry's state. ARGV: decrease, floor, hold, cut every, recovery a second, ttl. Returns {the factor now,
# 1 if this call cut it}.
SLOW = """
local decrease, floor, hold, every, recovery = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'factor', 'since', 'cut')
local factor = tonumber(s[1]) or 1
local since = tonumber(s[2]) or now
local cut = tonumber(s[3]) or 0
if factor < 1 and now > since then
  factor = math.min(1, factor + recovery * (now - since))
end
if now - cut < every then
  return {string.format('%.6f', factor), 0}
end
factor = math.max(floor, factor * decrease)
redis.call('HSET', KEYS[1], 'factor', string.format('%.9f', factor), 'since', string.format('%.6f', now + hold),
           'cut', string.format('%.6f', now))
redis.call('EXPIRE', KEYS[1], ARGV[6])
return {string.format('%.6f', factor), 1}
"""


@dataclass(frozen=True)
class RateLimits:
    """Variable blobgc_rate_limits, checked: which cap (its name and calls a second) applies to a bucket's key."""

    default: float | None = None
    buckets: Mapping[str, float] = field(default_factory=dict)
    prefixes: Mapping[str, tuple[tuple[str, float], ...]] = field(default_factory=dict)  # longest prefix first

    @classmethod
    def parse(cls, value: Any) -> RateLimits:
        """The Variable's value (parsed JSON, or None: unset). Raises ConfigurationError naming the Variable."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise ConfigurationError(
                f"Variable {VARIABLE} must be a JSON object of bucket (or bucket/prefix) -> deletes per second, "
                f'with "default" for the other buckets, e.g. {{"default": 3000, "media/thumbs/": 500}}; got {value!r}'
            )
        default: float | None = None
        buckets: dict[str, float] = {}
        prefixes: dict[str, list[tuple[str, float]]] = {}
        for name, rate in value.items():
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
                raise ConfigurationError(
                    f"Variable {VARIABLE}: {name!r} -> {rate!r} is not a number of deletes per second above 0"
                )
            bucket, _, prefix = str(name).partition("/")
            if name == "default":
                default = float(rate)
            elif not bucket:
                raise ConfigurationError(f"Variable {VARIABLE}: {name!r} names no bucket (bucket or bucket/prefix)")
            elif prefix:
                prefixes.setdefault(bucket, []).append((prefix, float(rate)))
            else:
                buckets[bucket] = float(rate)
        ordered = {b: tuple(sorted(p, key=lambda item: -len(item[0]))) for b, p in prefixes.items()}
        return cls(default, buckets, ordered)

    def __bool__(self) -> bool:
        return self.default is not None or bool(self.buckets) or bool(self.prefixes)

    def lowest(self) -> float:
        """The lowest configured rate (infinite when nothing is capped)."""
        rates = [r for ps in self.prefixes.values() for _, r in ps] + list(self.buckets.values())
        rates += [self.default] if self.default is not None else []
        return min(rates, default=float("inf"))

    def describe(self) -> str:
        """The caps in words, for the run's log."""
        caps = [f"{b}/{p}: {r:g}/s" for b, ps in self.prefixes.items() for p, r in ps]
        caps += [f"{b}: {r:g}/s" for b, r in self.buckets.items()]
        if self.default is not None:
            caps.append(f"any other bucket: {self.default:g}/s")
        return ", ".join(caps) or "none"

    def entry(self, bucket: str, key: str) -> tuple[str, float] | None:
        """(the cap's name, calls a second) for `key` of `bucket`: its longest configured prefix, else the bucket's
        own, else the default (for that bucket alone); None: not capped."""
        for prefix, rate in self.prefixes.get(bucket, ()):
            if key.startswith(prefix):
                return f"{bucket}/{prefix}", rate
        if bucket in self.buckets:
            return bucket, self.buckets[bucket]
        if self.default is not None:
            return bucket, self.default
        return None


@dataclass
class Taken:
    """What the cap made calls wait, for the run's log: seconds waited, and the lowest rate seen per cap."""

    waited_s: float = 0.0
    calls: int = 0
    waits: int = 0
    rates: dict[str, float] = field(default_factory=dict)


class RateCap:
    """The token buckets of `limits`, in `redis` (shared by every worker)."""

    def __init__(
        self,
        redis: Any,
        limits: RateLimits,
        *,
        sleep: Callable[[float], None] = time.sleep,
        hold_s: float = HOLD_S,
        recovery_per_s: float = RECOVERY_PER_S,
    ) -> None:
        self.redis, self.limits, self.sleep = redis, limits, sleep
        self.hold_s, self.recovery_per_s = hold_s, recovery_per_s
        self._take = redis.register_script(TAKE)
        self._slow = redis.register_script(SLOW)
        self.taken = Taken()
        self._lock = threading.Lock()  # the drains' threads note what they waited in `taken`

    def groups(self, bucket: str, keys: Iterable[str]) -> dict[tuple[str, float], list[str]]:
        out: dict[tuple[str, float], list[str]] = {}
        for key in keys:
            if (entry := self.limits.entry(bucket, key)) is not None:
                out.setdefault(entry, []).append(key)
        return out

    def take(self, bucket: str, keys: Iterable[str]) -> float:
        """Wait until `keys` (one call each) may be sent to `bucket` under their caps; the seconds waited. Redis
        unreachable raises `CapUnavailable`: the calls are not sent, and their keys stay owed for a retry."""
        wait = 0.0
        for (name, rate), mine in self.groups(bucket, keys).items():
            try:
                answer = self._take(
                    keys=[REDIS_PREFIX + name], args=[rate, len(mine), BURST_S, self.recovery_per_s, STATE_TTL_S]
                )
            except Exception as error:  # noqa: BLE001 - any failure of Redis: nothing may be sent uncapped
                raise CapUnavailable(error=f"{type(error).__name__}: {error}") from error
            wait = max(wait, float(answer[0]))
            now_rate = float(answer[1])
            with self._lock:
                self.taken.rates[name] = min(self.taken.rates.get(name, now_rate), now_rate)
        with self._lock:
            self.taken.calls += 1
        if wait > 0:
            with self._lock:
                self.taken.waited_s += wait
                self.taken.waits += 1
            self.sleep(wait)
        return wait

    def slowed(self, bucket: str, keys: Iterable[str]) -> None:
        """The store answered SlowDown for `keys` of `bucket`: halve their caps' rates (once a second at most)."""
        for name, _rate in self.groups(bucket, keys):
            settings = [DECREASE, FLOOR, self.hold_s, CUT_EVERY_S, self.recovery_per_s, STATE_TTL_S]
            try:
                factor, cut = self._slow(keys=[REDIS_PREFIX + name], args=settings)
            except Exception as error:  # noqa: BLE001 - the call's answer matters more than slowing the cap
                log.warning("could not slow the cap on %s down after a SlowDown (Redis: %s)", name, error)
                continue
            if int(cut):
                log.warning(
                    "%s answered SlowDown: blobgc's cap on %s is %.0f%% of its configured rate now, for %.0f s, then "
                    "recovering",
                    bucket,
                    name,
                    float(factor) * 100,
                    self.hold_s,
                )

    def rate_now(self, bucket: str, key: str = "") -> float | None:
        """The cap's rate now for `key` of `bucket` (configured rate times its SlowDown factor); None: not capped."""
        entry = self.limits.entry(bucket, key)
        if entry is None:
            return None
        stored, since = self.redis.hmget(REDIS_PREFIX + entry[0], "factor", "since")
        factor = float(stored) if stored is not None else 1.0
        if factor < 1 and since is not None:
            seconds, micros = self.redis.time()  # the clock the scripts use
            now = float(seconds) + float(micros) / 1_000_000
            factor = min(1.0, factor + self.recovery_per_s * max(0.0, now - float(since)))
        return float(entry[1] * factor)


def is_slowdown(code: str) -> bool:
    return code in SLOWDOWN_CODES


class CapUnavailable(BotoCoreError):  # type: ignore[misc]
    """The rate cap's Redis did not answer: the calls are not sent (a transient failure: their keys stay owed)."""

    fmt = "blobgc's delete-rate cap could not take its tokens from Redis ({error}); nothing was sent uncapped"


def throttled(response: Mapping[str, Any]) -> bool:
    """Whether an answer (botocore's parsed response) is a throttle: SlowDown and its kin, or a 503."""
    code = str((response.get("Error") or {}).get("Code", ""))
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return is_slowdown(code) or status == 503


class CappedStore:
    """An object store whose per-object calls (DeleteObjects' keys, HEAD, copies) take `cap`'s tokens first, and whose
    SlowDown answers slow the cap down. Everything else passes through to `store`."""

    def __init__(self, store: Any, cap: RateCap) -> None:
        self._store, self.cap = store, cap
        self._calling = threading.local()  # (bucket, keys) of the call this thread is making, for its retries

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def claim_keys(self) -> int:
        """Keys a drain's claim should take under the cap: about `CLAIM_S` seconds of the lowest configured rate
        (at least 100), so that the claim's transaction stays short while its calls wait for their tokens."""
        lowest = self.cap.limits.lowest()
        return max(100, int(lowest * CLAIM_S)) if lowest != float("inf") else 1 << 30

    def _call(self, bucket: str, keys: list[str], call: Callable[[], Any]) -> Any:
        self.cap.take(bucket, keys)
        self._watch_retries(bucket)
        self._calling.current = (bucket, keys)
        try:
            return call()
        except ClientError as error:
            if throttled(error.response):
                self.cap.slowed(bucket, keys)
            raise
        finally:
            self._calling.current = None

    def _watch_retries(self, bucket: str) -> None:
        """botocore retries a throttled call itself (its retry mode): each retry is sent again, so it takes its
        tokens again, and each throttled answer slows the cap, not only the last (`on_retry`)."""
        events = getattr(getattr(listing_client(self._store, bucket), "meta", None), "events", None)
        if events is not None and hasattr(events, "register_first"):
            events.register_first("needs-retry.s3", self.on_retry, unique_id=f"blobgc-rate-cap-{id(self)}")

    def on_retry(self, response: Any = None, **_: Any) -> None:
        """botocore's `needs-retry`: a throttled attempt of this thread's call slows the cap, and the retry (if
        botocore makes one) waits for its tokens. Returns None: botocore's own handler decides whether to retry."""
        current = getattr(self._calling, "current", None)
        if current is None or response is None:
            return
        http, parsed = response
        if throttled({**(parsed or {}), "ResponseMetadata": {"HTTPStatusCode": getattr(http, "status_code", 0)}}):
            self.cap.slowed(*current)
            self.cap.take(*current)

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any], **kwargs: Any) -> Any:  # noqa: N803
        """DeleteObjects in calls of at most `CHUNK_S` seconds of the lowest rate among the keys' caps."""
        objects = list(Delete.get("Objects", []))
        rates = [rate for _, rate in self.cap.groups(Bucket, [o["Key"] for o in objects])]
        size = max(1, int(min(rates) * CHUNK_S)) if rates else max(1, len(objects))
        merged: dict[str, Any] = {}
        for part in list(chunked(objects, size)) or [objects]:  # an empty request is sent as it is, once
            keys = [item["Key"] for item in part]
            answer = self._call(
                Bucket, keys, functools.partial(self._delete, Bucket, {**Delete, "Objects": part}, kwargs)
            )
            slowed = [e.get("Key", "") for e in answer.get("Errors", []) if is_slowdown(e.get("Code", ""))]
            if slowed:
                self.cap.slowed(Bucket, slowed)
            for field_name in ("Deleted", "Errors"):
                if field_name in answer:
                    merged.setdefault(field_name, []).extend(answer[field_name])
            merged["ResponseMetadata"] = answer.get("ResponseMetadata", {})
        return merged

    def _delete(self, bucket: str, delete: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        return self._store.delete_objects(Bucket=bucket, Delete=delete, **kwargs)

    def head_object(self, *, Bucket: str, Key: str, **kwargs: Any) -> Any:  # noqa: N803
        return self._call(Bucket, [Key], lambda: self._store.head_object(Bucket=Bucket, Key=Key, **kwargs))

    def copy_object(self, *, Bucket: str, Key: str, **kwargs: Any) -> Any:  # noqa: N803
        return self._call(Bucket, [Key], lambda: self._store.copy_object(Bucket=Bucket, Key=Key, **kwargs))

    def upload_part_copy(self, *, Bucket: str, Key: str, **kwargs: Any) -> Any:  # noqa: N803
        return self._call(Bucket, [Key], lambda: self._store.upload_part_copy(Bucket=Bucket, Key=Key, **kwargs))
