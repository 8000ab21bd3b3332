"""The thin layer between Airflow and the blobgc core: clients from connections, runs from the task context.

Only this module imports Airflow. Nothing here runs at DAG-parse time; DAG files call these
functions inside their tasks.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from blobgc.clients import S3_CONFIG, pg_connect
from blobgc.runs import RunRef

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
            raise ValueError(f"Variable {key} is not valid JSON: {error}") from error
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
    if (not isinstance(sizes, dict) or not sizes
            or not all(isinstance(k, str) and k.isidentifier() and isinstance(v, int) and v >= 0
                       for k, v in sizes.items())):
        raise ValueError('Variable blobgc_image_sizes must be a JSON object of size name -> longest edge in pixels '
                         '(0 = unscaled), e.g. {"orig": 0, "big": 1280, "medium": 640, "thumb": 160}')
    mark = variable("blobgc_image_watermark", None, json_value=True)
    watermark = None
    if mark:
        if not isinstance(mark, dict) or not isinstance(mark.get("text"), str):
            raise ValueError('Variable blobgc_image_watermark must be empty or {"text": str, "min_edge": int}')
        watermark = Watermark(mark["text"], int(mark.get("min_edge", 640)))
    return ImageSettings(bucket=blob_bucket(), sizes=sizes, watermark=watermark)


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
        raise ValueError('Variable blobgc_media_settings must be JSON like {"file_limit_mb": 10, "monthly_limit_mb": '
                         '200, "image_thumbs": [[640, 640], [240, 240]], "icon_thumbs": [[256, 256], [64, 64]]}: '
                         f"{error}") from error


def extra_blob_references() -> list[str]:
    """Declared non-foreign-key references: Variable `blobgc_extra_blob_references`, a JSON list of SELECTs."""
    value = variable("blobgc_extra_blob_references", [], json_value=True)
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ValueError("Variable blobgc_extra_blob_references must be a JSON list of SQL SELECT strings")
    return value


def reference_time(context: dict[str, Any]) -> datetime:
    """The instant a run's cutoffs are measured from: its data-interval end, else when it was due to run.

    Retries of a task see the same value, so a retry never widens what a run may delete.
    """
    end = context.get("data_interval_end")
    if end is None:
        end = context["dag_run"].run_after
    return end


def cutoff(context: dict[str, Any], **grace: float) -> datetime:
    return reference_time(context) - timedelta(**grace)


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


def destructive_params(grace_name: str, grace_default: int, grace_description: str, **extra: Any) -> dict[str, Any]:
    """`deleting_params` with the DAG's own grace Param."""
    from airflow.sdk import Param

    return deleting_params(**{grace_name: Param(grace_default, type="integer", minimum=0,
                                                description=grace_description)}, **extra)


@contextmanager
def gc_task(context: dict[str, Any]):
    """Open the application database for one task of a collecting DAG, with its run recorded."""
    from blobgc.runs import ensure_run

    run = run_ref(context)
    with pg_connection() as conn:
        ensure_run(conn, run, reference_time(context))
        yield conn, run


def finish_dag_run(conn: psycopg.Connection, run: RunRef, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The end of every blobgc DAG's report task: stamp the run finished, then emit its metrics."""
    from blobgc.outbox import owed_summary
    from blobgc.runs import finish_run

    totals = finish_run(conn, run, details)
    owed = owed_summary(conn, run.dag_id)[0]
    emit_run_metrics(run, totals, owed)
    return {**totals, "owed": owed}


def emit_run_metrics(run: RunRef, totals: dict[str, Any], owed: int) -> None:
    """`blobgc.<dag_id>.objects_deleted`, `.bytes_reclaimed` and `.rows_deleted` (counters, real runs, once
    per run even if the report task is retried) and `.owed` (a gauge: objects the DAG still owes),
    through Airflow's metrics ([metrics] statsd_on / otel_on). A metrics failure never fails the run."""
    try:
        from airflow.sdk.observability import stats
        from airflow.sdk.observability.metrics import stats_utils

        # a task run by the task runner has this done already; `airflow dags test` runs tasks in-process
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
        prefix = f"blobgc.{run.dag_id}"
        if not run.dry_run and totals.get("first_finish"):
            for name in ("objects_deleted", "bytes_reclaimed", "rows_deleted"):
                stats.incr(f"{prefix}.{name}", count=int(totals[name]))
        stats.gauge(f"{prefix}.owed", owed)
    except Exception as error:  # noqa: BLE001 - metrics are best effort
        import logging

        logging.getLogger(__name__).warning("could not emit blobgc metrics for %s: %s", run.dag_id, error)


OUTBOX_DRAINS = 2  # drains side by side: one's database work overlaps the other's S3 calls


def drain_owed_objects(context: dict[str, Any]) -> dict[str, int]:
    """The body of every `delete_owed_objects` task: delete what the DAG owes in S3, settle the outbox."""
    from blobgc.outbox import delete_owed_objects

    with gc_task(context) as (conn, run):
        result = delete_owed_objects(conn, s3_client(), run, batch_size=context["params"]["batch_size"],
                                     workers=OUTBOX_DRAINS, connect=pg_connector())
    return vars(result)
