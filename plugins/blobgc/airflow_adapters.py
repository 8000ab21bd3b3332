"""The thin layer between Airflow and the blobgc core: clients from connections, runs from the task context.

Only this module imports Airflow. Nothing here runs at DAG-parse time; DAG files call these
functions inside their tasks.
"""
from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from blobgc.clients import S3_CONFIG, pg_connect
from blobgc.runs import RunRef, cutoff  # noqa: F401 - cutoff is re-exported for the DAG files
from blobgc.settings import ConfigurationError

PG_CONN_ID = "blobgc_postgres"
S3_CONN_ID = "blobgc_s3"
REDIS_CONN_ID = "blobgc_redis"
S3_POOL = "blobgc_s3"
HTTP_POOL = "blobgc_http"


def pg_conninfo(conn_id: str = PG_CONN_ID) -> str:
    from airflow.sdk import Connection

    c = Connection.get(conn_id)
    extra = {k: v for k, v in c.extra_dejson.items() if k in {"sslmode", "sslrootcert", "application_name",
                                                               "options", "target_session_attrs"}}
    return make_conninfo(
        host=c.host or "localhost", port=c.port or 5432, user=c.login or None, password=c.password or None,
        dbname=c.schema or None, application_name=extra.pop("application_name", "blobgc"), **extra,
    )


@contextmanager
def pg_connection(conn_id: str = PG_CONN_ID):
    """A psycopg 3 connection (autocommit; work opens its own transactions) from an Airflow connection."""
    conn: psycopg.Connection = pg_connect(pg_conninfo(conn_id))
    try:
        yield conn
    finally:
        conn.close()


def pg_connector(conn_id: str = PG_CONN_ID):
    """A zero-argument factory of further connections, for work spread over several connections."""
    conninfo = pg_conninfo(conn_id)
    return lambda: pg_connect(conninfo)


def s3_client(conn_id: str = S3_CONN_ID):
    """A boto3 S3 client from the `aws` connection; `endpoint_url` in its extra points at any S3-compatible store."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    return S3Hook(aws_conn_id=conn_id, config=S3_CONFIG).get_conn()


def redis_client(conn_id: str = REDIS_CONN_ID):
    from airflow.providers.redis.hooks.redis import RedisHook

    return RedisHook(redis_conn_id=conn_id).get_conn()


def variable(key: str, default: Any, *, json_value: bool = False) -> Any:
    from airflow.sdk import Variable

    raw = Variable.get(key, default=None)
    if raw is None:
        return default
    if json_value and isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError as error:
            raise ConfigurationError(f"Variable {key} is not valid JSON: {error}") from error
    return raw


def blob_bucket() -> str:
    return variable("blobgc_bucket", "blobgc")


def paste_redis_prefix() -> str:
    """The prefix of seed 002's cache keys in Redis: Variable `blobgc_paste_redis_prefix`, default empty."""
    return variable("blobgc_paste_redis_prefix", "")


def image_settings():
    """Seed 001's cutting and storage: Variables blobgc_image_sizes, blobgc_image_watermark, blobgc_bucket."""
    from blobgc.image_processing import DEFAULT_SIZES, Watermark
    from blobgc.images import ImageSettings

    sizes = variable("blobgc_image_sizes", DEFAULT_SIZES, json_value=True)
    check_image_sizes(sizes)
    mark = variable("blobgc_image_watermark", None, json_value=True)
    watermark = None
    if mark:
        if not isinstance(mark, dict) or not isinstance(mark.get("text"), str):
            raise ConfigurationError('Variable blobgc_image_watermark must be empty or {"text": str, "min_edge": int}')
        watermark = Watermark(mark["text"], int(mark.get("min_edge", 640)))
    return ImageSettings(bucket=blob_bucket(), sizes=sizes, watermark=watermark)


IMAGE_SIZE_NAME = re.compile(r"[a-z0-9_]+")


def check_image_sizes(sizes: object) -> None:
    """Variable blobgc_image_sizes: size names of `[a-z0-9_]+` (they become file names) to longest edges >= 0."""
    example = '{"orig": 0, "big": 1280, "medium": 640, "thumb": 160}'
    if not isinstance(sizes, dict) or not sizes:
        raise ConfigurationError("Variable blobgc_image_sizes must be a non-empty JSON object of size name -> "
                                 f"longest edge in pixels (0 = unscaled), e.g. {example}")
    for name, edge in sizes.items():
        if not isinstance(name, str) or not IMAGE_SIZE_NAME.fullmatch(name):
            raise ConfigurationError(f"Variable blobgc_image_sizes: size name {name!r} is not allowed: a name becomes "
                                     "part of the file name images/{id[:2]}/{id}/{name}.jpg and must match [a-z0-9_]+ "
                                     f"(lower-case ASCII letters, digits, underscore), e.g. {example}")
        if not isinstance(edge, int) or isinstance(edge, bool) or edge < 0:
            raise ConfigurationError(f"Variable blobgc_image_sizes: size {name!r} has longest edge {edge!r}; it must "
                                     "be a whole number of pixels >= 0 (0 = unscaled)")


def crawler_allowed_networks() -> list[str]:
    """Variable blobgc_crawler_allowed_networks: CIDRs the crawler may fetch from despite being loopback, link-local,
    private or multicast (a JSON list, default empty: none). The local stack sets ["127.0.0.0/8"]."""
    import ipaddress

    value = variable("blobgc_crawler_allowed_networks", [], json_value=True)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError('Variable blobgc_crawler_allowed_networks must be a JSON list of CIDRs, '
                                 'e.g. ["10.1.2.0/24"]')
    for cidr in value:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError as error:
            raise ConfigurationError(f"Variable blobgc_crawler_allowed_networks: {cidr!r} is not a CIDR: "
                                     f"{error}") from error
    return value


def media_settings():
    """Seed 004's store: Variable blobgc_media_bucket_prefix, and blobgc_media_settings (JSON, optional):
    {"file_limit_mb": 10, "monthly_limit_mb": 200, "image_thumbs": [[640, 640], [240, 240]],
    "icon_thumbs": [[256, 256], [64, 64]]}."""
    from blobgc.media import MIB, MediaSettings

    extra = variable("blobgc_media_settings", {}, json_value=True) or {}
    defaults = MediaSettings()
    try:
        if not isinstance(extra, dict) or set(extra) - {"file_limit_mb", "monthly_limit_mb", "image_thumbs",
                                                         "icon_thumbs"}:
            raise ValueError("unknown keys")
        sizes = {k: tuple((int(w), int(h)) for w, h in extra[k]) for k in ("image_thumbs", "icon_thumbs") if k in extra}
        if any(not v or min(min(s) for s in v) < 1 for v in sizes.values()):
            raise ValueError("thumbnail sizes must be positive")
        return MediaSettings(
            bucket_prefix=variable("blobgc_media_bucket_prefix", "fakebook-"),
            file_limit_bytes=int(extra.get("file_limit_mb", defaults.file_limit_bytes / MIB) * MIB),
            monthly_limit_bytes=int(extra.get("monthly_limit_mb", defaults.monthly_limit_bytes / MIB) * MIB),
            **sizes,
        )
    except (TypeError, ValueError) as error:
        raise ConfigurationError('Variable blobgc_media_settings must be JSON like {"file_limit_mb": 10, "monthly_limit_mb": '
                         '200, "image_thumbs": [[640, 640], [240, 240]], "icon_thumbs": [[256, 256], [64, 64]]}: '
                         f"{error}") from error


def extra_blob_references() -> list[str]:
    """Declared non-foreign-key references: Variable `blobgc_extra_blob_references`, a JSON list of SELECTs."""
    value = variable("blobgc_extra_blob_references", [], json_value=True)
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ConfigurationError("Variable blobgc_extra_blob_references must be a JSON list of SQL SELECT strings")
    return value


def requested_reference_time(context: dict[str, Any]) -> datetime:
    """The instant a run asks its cut-offs to be measured from: its data-interval end, else when it was due.

    This may lie in the future (a manual trigger or `airflow dags test` with a future logical date);
    `blobgc.runs.ensure_run` clamps it to the database's now() once, when the run's first task starts,
    and every task and retry of the run then reads the same reference time back (`RunRef.reference_time`).
    """
    end = context.get("data_interval_end")
    if end is None:
        end = context["dag_run"].run_after
    return end


def run_ref(context: dict[str, Any]) -> RunRef:
    params = context["params"]
    return RunRef(dag_id=context["dag"].dag_id, run_id=context["run_id"], dry_run=bool(params.get("dry_run", False)))


# ---------------------------------------------------------------- DAG wiring shared by every blobgc DAG
# Deployment knobs read from the environment at parse time (never from the metadata database):
# BLOBGC_TASK_RETRIES (default 3) and BLOBGC_RETRY_DELAY_SECONDS (default 30, doubled per retry).
DEFAULT_ARGS: dict[str, Any] = {
    "owner": "blobgc",
    "retries": int(os.environ.get("BLOBGC_TASK_RETRIES", "3")),
    "retry_delay": timedelta(seconds=float(os.environ.get("BLOBGC_RETRY_DELAY_SECONDS", "30"))),
    "retry_exponential_backoff": 2.0,  # 30 s, 60 s, 120 s ...
    "max_retry_delay": timedelta(minutes=15),
    "execution_timeout": timedelta(hours=2),
}


def deleting_params(**extra: Any) -> dict[str, Any]:
    """The Params every deleting DAG takes (CONTRACT §4): dry_run and batch_size, plus `extra`."""
    from airflow.sdk import Param

    return {
        "dry_run": Param(False, type="boolean", description="Report what would be deleted and delete nothing."),
        "batch_size": Param(1000, type="integer", minimum=1, maximum=1000,
                            description="Rows per transaction and keys per S3 DeleteObjects call (at most 1000)."),
        **extra,
    }


def destructive_params(grace_name: str, grace_default: int, grace_description: str, *, grace_minimum: int = 0,
                       **extra: Any) -> dict[str, Any]:
    """`deleting_params` with the DAG's own grace Param (at least `grace_minimum`)."""
    from airflow.sdk import Param

    return deleting_params(**{grace_name: Param(grace_default, type="integer", minimum=grace_minimum,
                                                description=grace_description)}, **extra)


@contextmanager
def failing_fast():
    """Turn a ConfigurationError into a task failure that Airflow does not retry: no retry can fix it."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        yield
    except ConfigurationError as error:
        raise AirflowFailException(str(error)) from error


@contextmanager
def gc_task(context: dict[str, Any]):
    """Open the application database for one task of a collecting DAG, with its run recorded.

    Yields the connection and the run, whose `reference_time` (never past the present) every cut-off
    of the task is measured from: `blobgc.runs.cutoff(run, hours=...)`. A ConfigurationError inside
    fails the task at once, without retries.
    """
    from blobgc.runs import ensure_run

    with failing_fast(), pg_connection() as conn:
        run = ensure_run(conn, run_ref(context), requested_reference_time(context))
        yield conn, run


def finish_dag_run(conn: psycopg.Connection, run: RunRef, details: dict[str, Any] | None = None,
                   extra_counters: dict[str, int] | None = None) -> dict[str, Any]:
    """The end of every blobgc DAG's report task: stamp the run finished, then emit its metrics (and any
    `extra_counters` of the DAG's own, such as dropped dead letters)."""
    from blobgc.outbox import owed_summary
    from blobgc.runs import finish_run

    totals = finish_run(conn, run, details)
    owed, _bytes, _attempts, parked = owed_summary(conn, run.dag_id)
    emit_run_metrics(run, totals, owed, parked, extra_counters)
    return {**totals, "owed": owed, "parked": parked}


def emit_run_metrics(run: RunRef, totals: dict[str, Any], owed: int, parked: int = 0,
                     extra_counters: dict[str, int] | None = None) -> None:
    """`blobgc.<dag_id>.objects_deleted`, `.bytes_reclaimed` and `.rows_deleted` (counters, real runs, once
    per run even if the report task is retried), `.owed` and `.parked` (gauges: objects the DAG still
    owes, and those of them parked after failing again and again), and any `extra_counters`, through
    Airflow's metrics ([metrics] statsd_on / otel_on). A metrics failure never fails the run."""
    try:
        from airflow.sdk.observability import stats
        from airflow.sdk.observability.metrics import stats_utils

        # a task run by the task runner has this done already; `airflow dags test` runs tasks in-process
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
        prefix = f"blobgc.{run.dag_id}"
        if not run.dry_run and totals.get("first_finish"):
            for name in ("objects_deleted", "bytes_reclaimed", "rows_deleted"):
                stats.incr(f"{prefix}.{name}", count=int(totals[name]))
            for name, count in (extra_counters or {}).items():
                if count:
                    stats.incr(f"{prefix}.{name}", count=int(count))
        stats.gauge(f"{prefix}.owed", owed)
        stats.gauge(f"{prefix}.parked", parked)
    except Exception as error:  # noqa: BLE001 - metrics are best effort
        import logging

        logging.getLogger(__name__).warning("could not emit blobgc metrics for %s: %s", run.dag_id, error)


OUTBOX_DRAINS = 2  # drains side by side: one's database work overlaps the other's S3 calls


def drain_owed_objects(context: dict[str, Any], *, fail_on_parked: bool = True) -> dict[str, int]:
    """The body of every `delete_owed_objects` task: delete what the DAG owes in S3, settle the outbox.

    Fails (after draining everything else) while any of the DAG's owed deletions is parked, so that
    on-call sees it; a transient S3 failure fails it too, for Airflow to retry.
    """
    from blobgc.outbox import OwedDeletionsParked, delete_owed_objects

    with gc_task(context) as (conn, run):
        result = delete_owed_objects(conn, s3_client(), run, batch_size=context["params"]["batch_size"],
                                     workers=OUTBOX_DRAINS, connect=pg_connector())
    if result.parked and fail_on_parked:
        raise OwedDeletionsParked(
            f"{result.parked} owed deletions of {run.dag_id} are parked: they failed {PARK_HINT}; the rest was "
            f"drained ({result.objects_deleted} objects deleted by this task)")
    return result.counts()


PARK_HINT = ("again and again for a reason no retry fixes (see blobgc.outbox.last_errors, or the reclaim page). Fix "
             "the cause, then unpark them: python -m blobgc.outbox unpark <dag_id>")
