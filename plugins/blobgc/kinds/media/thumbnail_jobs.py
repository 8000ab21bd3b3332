"""Seed 004's thumbnail job queue in Redis, as the application and blobgc_media_thumbnails both use it.

docs/reference.md §3: the list `media-thumb-queue` holds JSON jobs `{"type": "image"|"icon", "bucket": ...,
"originalKey": ...}`. A worker moves a job atomically (LMOVE) to `media-thumb-queue:processing` when
it takes it and removes it only once its thumbnails are written, so a worker that dies loses
nothing. Jobs that can never succeed go to `media-thumb-queue:dead` with the reason; that list keeps
its newest `DEAD_LETTER_CAP` entries, and what is trimmed is counted.

**Deduplication.** The hash `media-thumb-queue:queued` maps `{bucket}/{originalKey}` to the Redis time
the job was queued, written with the LPUSH by one Lua script and removed when a worker finishes or
dead-letters the job. A master lacking thumbnails is queued again only when its entry is older than
the cleaner's min age, so a lost job is requeued later and never blocks it forever; a new upload
always queues (its bytes are new).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

log = logging.getLogger(__name__)

QUEUE = "media-thumb-queue"  # docs/reference.md §3: JSON {"type": "image"|"icon", "bucket": ..., "originalKey": ...}
PROCESSING = f"{QUEUE}:processing"  # jobs a worker has taken and not finished: a dead worker's are retried
DEAD_LETTERS = f"{QUEUE}:dead"  # jobs that can never succeed (not an image, a bomb), with the reason
QUEUED = f"{QUEUE}:queued"  # hash: "{bucket}/{originalKey}" -> Redis time (epoch seconds) its job was queued
DEAD_LETTER_CAP = 10_000  # the dead-letter list keeps this many, newest first; older ones are dropped and counted
QUEUED_ENTRY_MAX_AGE = 7 * 24 * 3600  # a queued-entry this old belongs to a job lost long ago: forgotten


# Push jobs whose master has no recent entry in the queued hash, recording when, in one atomic step.
# KEYS: queue, queued hash. ARGV: requeue_after seconds (negative: always push), then field, job pairs.
QUEUE_JOBS_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local requeue_after = tonumber(ARGV[1])
local pushed = 0
for i = 2, #ARGV, 2 do
  local queued = tonumber(redis.call('HGET', KEYS[2], ARGV[i]))
  if requeue_after < 0 or queued == nil or now - queued >= requeue_after then
    redis.call('HSET', KEYS[2], ARGV[i], string.format('%.3f', now))
    redis.call('LPUSH', KEYS[1], ARGV[i + 1])
    pushed = pushed + 1
  end
end
return pushed
"""


def text(raw: str | bytes) -> str:
    """A Redis value as text, whether the Redis client decodes responses or not."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def queued_field(bucket: str, key: str) -> str:
    """A master's field in the queued hash: bucket-qualified, so two stores sharing a Redis never collide."""
    return f"{bucket}/{key}"


def job_json(kind: str, bucket: str, key: str) -> str:
    """A thumbnail job as docs/reference.md §3 shapes it."""
    return json.dumps({"type": kind, "bucket": bucket, "originalKey": key})


def queue_thumbnail_jobs(
    redis, kind: str, bucket: str, keys: list[str], *, requeue_after_seconds: float | None = None
) -> int:
    """Queue the thumbnails of `keys` (masters of one bucket); returns how many jobs were pushed.

    With `requeue_after_seconds`, a master whose job was queued less than that long ago (by the
    Redis clock) is skipped: it is queued or being worked on already. Without it every key is
    pushed (a new upload: its bytes are new even when a profile slot's key is not). Either way the
    time is recorded, with the push, by one script, so a check and a push never interleave.
    """
    pushed = 0
    after = -1.0 if requeue_after_seconds is None else float(requeue_after_seconds)
    for start in range(0, len(keys), 500):
        args: list[str | float] = [after]
        for key in keys[start : start + 500]:
            args += [queued_field(bucket, key), job_json(kind, bucket, key)]
        pushed += int(redis.eval(QUEUE_JOBS_SCRIPT, 2, QUEUE, QUEUED, *args))
    return pushed


def recently_queued(redis, bucket: str, keys: list[str], requeue_after_seconds: float) -> set[str]:
    """The keys that `queue_thumbnail_jobs` would skip now (read only: what a dry run reports)."""
    if not keys:
        return set()
    seconds, micros = redis.time()
    now = seconds + micros / 1_000_000
    recent: set[str] = set()
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        times = redis.hmget(QUEUED, [queued_field(bucket, k) for k in chunk])
        recent.update(
            k
            for k, t in zip(chunk, times, strict=True)
            if t is not None and now - float(text(t)) < requeue_after_seconds
        )
    return recent


def taken_jobs(redis, batch: int) -> list[str]:
    """Move up to `batch` jobs from the queue to the processing list (oldest first), in one round trip."""
    pipe = redis.pipeline(transaction=False)
    for _ in range(batch):
        pipe.lmove(QUEUE, PROCESSING, "RIGHT", "LEFT")
    return [j for j in pipe.execute() if j is not None]


# Settle one taken job in one atomic step: dead-letter it (trimming the list to its cap), drop it from
# the processing list, forget its queued entry. Returns how many old dead letters were trimmed.
# KEYS: processing, dead letters, queued hash. ARGV: raw job, dead letter or '', cap, queued field or ''.
FINISH_JOB_SCRIPT = """
local dropped = 0
if ARGV[2] ~= '' then
  redis.call('LPUSH', KEYS[2], ARGV[2])
  local cap = tonumber(ARGV[3])
  local length = redis.call('LLEN', KEYS[2])
  if length > cap then
    redis.call('LTRIM', KEYS[2], 0, cap - 1)
    dropped = length - cap
  end
end
redis.call('LREM', KEYS[1], 1, ARGV[1])
if ARGV[4] ~= '' then redis.call('HDEL', KEYS[3], ARGV[4]) end
return dropped
"""


def queued_field_of(raw: str | bytes) -> str:
    """The queued-hash field of a job, or '' for a job too malformed to name its master."""
    try:
        job = json.loads(text(raw))
        bucket, key = job["bucket"], job["originalKey"]
    except (ValueError, KeyError, TypeError):
        return ""
    return queued_field(bucket, key) if isinstance(bucket, str) and isinstance(key, str) else ""


def check_dead_letter_cap(cap: int) -> None:
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise ValueError(f"the dead-letter cap must be a whole number of at least 1, not {cap!r}")


def finish(redis, raw: str | bytes, dead_reason: str | None = None, *, dead_letter_cap: int = DEAD_LETTER_CAP) -> int:
    """Settle a taken job (done, or dead-lettered with `dead_reason`); returns the dead letters trimmed."""
    dead = (
        ""
        if dead_reason is None
        else json.dumps({"job": text(raw), "error": dead_reason, "at": datetime.now(UTC).isoformat()})
    )
    return int(
        redis.eval(
            FINISH_JOB_SCRIPT, 3, PROCESSING, DEAD_LETTERS, QUEUED, raw, dead, dead_letter_cap, queued_field_of(raw)
        )
    )


# Trim the dead-letter list to its cap (a lowered cap applies at once). KEYS: dead letters. ARGV: cap.
TRIM_DEAD_LETTERS_SCRIPT = """
local cap = tonumber(ARGV[1])
local length = redis.call('LLEN', KEYS[1])
if length <= cap then return 0 end
redis.call('LTRIM', KEYS[1], 0, cap - 1)
return length - cap
"""

# Forget queued entries recorded before a time, unless refreshed since. KEYS: queued hash. ARGV: before, fields.
FORGET_ENTRIES_SCRIPT = """
local forgotten = 0
for i = 2, #ARGV do
  local queued = tonumber(redis.call('HGET', KEYS[1], ARGV[i]))
  if queued ~= nil and queued < tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], ARGV[i])
    forgotten = forgotten + 1
  end
end
return forgotten
"""


def forget_lost_jobs(redis, older_than_seconds: float = QUEUED_ENTRY_MAX_AGE) -> int:
    """Remove queued-hash entries older than `older_than_seconds`: their jobs were lost (a worker
    settles every job it takes), and the hash must not grow with masters deleted since."""
    seconds, micros = redis.time()
    before = seconds + micros / 1_000_000 - older_than_seconds
    forgotten, old = 0, []
    for field_name, queued in redis.hscan_iter(QUEUED, count=1000):
        if float(text(queued)) < before:
            old.append(text(field_name))
        if len(old) == 500:
            forgotten += int(redis.eval(FORGET_ENTRIES_SCRIPT, 1, QUEUED, before, *old))
            old = []
    if old:
        forgotten += int(redis.eval(FORGET_ENTRIES_SCRIPT, 1, QUEUED, before, *old))
    return forgotten


def thumbnail_queue_counts(redis) -> dict[str, int]:
    """How many jobs are queued, taken by a worker (processing), dead-lettered, and tracked in the
    queued hash: what a dry run of blobgc_media_thumbnails reports instead of draining."""
    pipe = redis.pipeline(transaction=True)
    pipe.llen(QUEUE)
    pipe.llen(PROCESSING)
    pipe.llen(DEAD_LETTERS)
    pipe.hlen(QUEUED)
    queued, processing, dead, tracked = pipe.execute()
    log.info(
        "thumbnail queue: %d jobs queued, %d in processing, %d dead-lettered, %d masters tracked as queued "
        "(dry run: nothing taken)",
        queued,
        processing,
        dead,
        tracked,
    )
    return {"queued": queued, "processing": processing, "dead_letters": dead, "tracked": tracked}
