"""The steps every blobgc DAG is wired from: `gc_step` for a DAG's own tasks, and the shared ones.

`gc_step` turns `def task(step: Step, ...)` into an Airflow task whose context values (the DAG run,
its id, its Params, its data-interval end) come in as task arguments, never through
`get_current_context()`. The task opens the application database, records the run (fixing its
reference time, never past the present), hands the collector a `Step`, and sends a typed result
(`blobgc.core.results.TaskResult`) to XCom as `to_xcom()`. A ConfigurationError fails the task at
once, without retries: no retry can fix a bad setting.

The shared steps exist once and are called from every DAG that needs them:
`drain_owed_objects` (delete what the outbox owes), `purge_owed_cache_keys` (unlink what Redis is
owed), `report_run` (finish the run's report, emit its metrics). The steps of a planned deletion (fix the
plan, plan, execute what the gate let through) are the engine's (`blobgc.engine.run`), wired by
`blobgc.dag_kit.builder`. A `Step` is the engine's `Work`.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from botocore.exceptions import ClientError

from blobgc.core.migrations import check_schema_current
from blobgc.core.outbox import DrainResult, OwedDeletionsParked, delete_owed_objects, owed_summary
from blobgc.core.rate import CappedStore, RateCap
from blobgc.core.replica import PRIMARY, Reads, replica_reads
from blobgc.core.replica import record as record_reads
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, cutoff, ensure_run, finish_run
from blobgc.core.settings import ConfigurationError
from blobgc.core.timeouts import timed_out
from blobgc.dag_kit.collections import quarantine_policy, stores_by_bucket
from blobgc.dag_kit.connections import pg_connection, pg_connector, redis_client, replica_connector, s3_client
from blobgc.dag_kit.deadlines import check_deadlines_variable
from blobgc.dag_kit.notify import check_notify_variable
from blobgc.dag_kit.params import S3_POOL
from blobgc.dag_kit.pools import check_dag_pools
from blobgc.dag_kit.prices import sync_storage_prices
from blobgc.dag_kit.privileges import check_dag_privileges
from blobgc.dag_kit.tables import check_required_tables
from blobgc.dag_kit.unfixable import drain_refusal, unfixable
from blobgc.dag_kit.variables import blob_bucket, db_timeouts, rate_limits

log = logging.getLogger(__name__)

OUTBOX_DRAINS = 2  # drains side by side: one's database work overlaps the other's S3 calls
# The context values a step receives as arguments (Airflow passes a task the ones its signature names).
CONTEXT_ARGS = ("dag_run", "run_id", "params", "data_interval_end", "task")


@dataclass
class Step:
    """What one task of a collecting DAG works with: the application database, the run, its Params.

    `cutoff(hours=24)` is the run's reference time minus a grace: the one way a DAG computes a cut-off.
    """

    conn: psycopg.Connection
    run: RunRef
    params: dict[str, Any]
    task_id: str = ""
    _s3: Any = field(default=None, repr=False)
    _redis: Any = field(default=None, repr=False)
    _reads: Reads | None = field(default=None, repr=False)

    def cutoff(self, **grace: float) -> datetime:
        return cutoff(self.run, **grace)

    @property
    def s3(self):
        """The object stores of the run's buckets: `blobgc_s3`'s, routed per bucket to its own connection's store
        where a collection or Variable blobgc_bucket_connections names one (`stores_by_bucket`)."""
        if self._s3 is None:
            self._s3 = stores_by_bucket(s3_client())
        return self._s3

    @property
    def redis(self):
        if self._redis is None:
            self._redis = redis_client()
        return self._redis

    @property
    def capped_s3(self):
        """`s3` under the delete-rate cap of Variable blobgc_rate_limits (`blobgc.core.rate`), shared through the
        stack's Redis by every worker: for the steps that delete, HEAD or copy object by object. Unset: `s3`."""
        limits = rate_limits()
        if not limits:
            return self.s3
        log.info("per-object calls capped across all workers by Variable blobgc_rate_limits: %s", limits.describe())
        return CappedStore(self.s3, RateCap(self.redis, limits))

    @property
    def connect(self) -> Callable[[], psycopg.Connection]:
        """Further connections to the application database, for work spread over several."""
        return pg_connector(timeouts=db_timeouts())

    @property
    def reads(self) -> Reads:
        """Where this step's candidate scans read (`blobgc.core.replica`): the replica of connection
        blobgc_postgres_replica when it is set, else the primary. Measured, recorded on the run and logged once."""
        if self._reads is None:
            replica = replica_connector(timeouts=db_timeouts())
            self._reads = replica_reads(replica) if replica is not None else Reads(PRIMARY, self.connect)
            record_reads(self.conn, self.run, self.task_id or "task", self._reads)
        return self._reads


@contextmanager
def failing_fast() -> Iterator[None]:
    """Turn a ConfigurationError into a task failure that Airflow does not retry: no retry can fix it. So are a
    missing bucket or grant, a bucket that refuses blobgc, a missing table (`blobgc.dag_kit.unfixable`), each
    named with what to do; a transient S3 or database failure is raised as it is, for Airflow to retry."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        yield
    except ConfigurationError as error:
        raise AirflowFailException(str(error)) from error
    except (psycopg.Error, ClientError) as error:
        if (cancelled := timed_out(error)) is not None:
            raise cancelled from error  # retried by Airflow: the step goes on from its last checkpoint
        refusal = unfixable(error)
        if refusal is None:
            raise
        raise AirflowFailException(str(refusal)) from error


@contextmanager
def open_step(
    dag_run: Any,
    run_id: str,
    params: dict[str, Any],
    data_interval_end: datetime | None,
    first: bool = False,
    task_id: str = "",
) -> Iterator[Step]:
    """The database connection and the recorded run of one task (see `Step`); a DAG's `first` task checks first
    that the role holds every privilege the run needs (a dry run: the real run's), before anything is read."""
    requested = data_interval_end if data_interval_end is not None else dag_run.run_after
    run = RunRef(dag_id=dag_run.dag_id, run_id=run_id, dry_run=bool(params.get("dry_run", False)))
    with failing_fast(), pg_connection(timeouts=db_timeouts()) as conn:
        if first:  # a missing grant fails at once, naming each privilege and its GRANT
            check_dag_privileges(conn, run.dag_id, params)
        check_schema_current(conn)  # a schema behind the code fails the task, saying what to run
        check_required_tables(conn, run.dag_id)  # a DAG enabled without its tables fails, naming them
        yield Step(conn, ensure_run(conn, run, requested), dict(params), task_id)


def gc_step(
    *, checks: tuple[Callable[[], object], ...] = (), **task_kwargs: Any
) -> Callable[[Callable[..., Any]], Any]:
    """`@gc_step(pool=..., ...)` over `def name(step: Step, *args) -> TaskResult | Any`: an Airflow task.

    The task's own arguments (XCom inputs, mapped values) follow `step`; Airflow passes the context
    values the wrapper names (`CONTEXT_ARGS`). A returned TaskResult goes to XCom as `to_xcom()`.
    `checks` (settings to read, such as Variables) run first, before the run is even recorded: a bad
    one fails the task with nothing written.
    """

    def decorate(fn: Callable[..., Any]) -> Any:
        from airflow.sdk import task

        own = [p for p in list(inspect.signature(fn).parameters.values())[1:] if p.kind != p.VAR_KEYWORD]

        @functools.wraps(fn)
        def body(
            *args: Any,
            dag_run: Any = None,
            run_id: str = "",
            params: dict | None = None,
            data_interval_end: datetime | None = None,
            task: Any = None,
            **kwargs: Any,
        ) -> Any:
            first = task is not None and not task.upstream_task_ids
            with failing_fast():
                if first:  # a DAG's first task checks the deployment:
                    check_dag_pools(task)  # every pool its tasks use exists,
                    check_notify_variable()  # and the failure alerts it would send are configured right,
                    check_deadlines_variable()  # and so are the deadlines the DAGs declare
                for check in checks:
                    check()
            task_id = getattr(task, "task_id", "")
            with open_step(dag_run, run_id, params or {}, data_interval_end, first=first, task_id=task_id) as step:
                result = fn(step, *args, **kwargs)
            return result.to_xcom() if isinstance(result, TaskResult) else result

        body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            own + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in CONTEXT_ARGS]
        )
        del body.__wrapped__  # Airflow reads the signature above, not fn's
        return task(**task_kwargs)(body)

    return decorate


# ------------------------------------------------------------------------------------------ shared steps
def drain_owed_objects(task_id: str = "delete_owed_objects", *, fail_on_parked: bool = True, **task_kwargs: Any):
    """The step that deletes what the DAG owes in S3 and settles the outbox (in pool blobgc_s3).

    Fails, after draining everything else, while any of the DAG's owed deletions is parked, so that
    on-call sees it (`fail_on_parked=False` for a DAG's first, catch-up drain, so the DAG goes on);
    a transient S3 failure fails it too, for Airflow to retry. A bucket that is missing or refuses blobgc, met by
    this drain, fails it (after the rest was drained) without retries, naming the bucket and what points at it.
    Its keys stay owed: a later run's catch-up drain backs off from them quietly, and once they have failed
    again and again they are parked, which fails the last drain as above.
    """

    @gc_step(task_id=task_id, pool=S3_POOL, **task_kwargs)
    def drain(step: Step) -> DrainResult:
        store = step.capped_s3
        result = delete_owed_objects(
            step.conn,
            store,
            step.run,
            batch_size=step.params["batch_size"],
            workers=OUTBOX_DRAINS,
            connect=step.connect,
            default_bucket=blob_bucket(),
            quarantine=quarantine_policy(),
        )
        if isinstance(store, CappedStore):
            taken = store.cap.taken
            log.info(
                "the rate cap made %d of %d calls wait, %.1f s in all; lowest rate met per cap: %s",
                taken.waits,
                taken.calls,
                taken.waited_s,
                ", ".join(f"{name} {rate:.0f}/s" for name, rate in sorted(taken.rates.items())) or "none",
            )
        if fail_on_parked and (refusal := drain_refusal(result)) is not None:
            raise refusal  # a bucket missing or refusing blobgc: its keys stay owed, and no retry can fix it
        if result.parked and fail_on_parked:
            raise OwedDeletionsParked(
                f"{result.parked} owed deletions of {step.run.dag_id} are parked: they failed again and again for "
                "a reason no retry fixes (see blobgc.outbox.last_errors, or the reclaim page). Fix the cause, then "
                f"unpark them: python -m blobgc.core.outbox unpark {step.run.dag_id}. The rest was drained "
                f"({result.objects_deleted} objects deleted by this task)."
            )
        return result

    return drain


def purge_quarantine_step(task_id: str = "purge_quarantine", **task_kwargs: Any):
    """The step that deletes the DAG's quarantine copies past their window and only then counts their bytes as
    reclaimed (`blobgc.core.quarantine.purge_quarantine`; in pool blobgc_s3). A dry run reports what is due."""
    from blobgc.core.quarantine import QuarantinePurge, purge_quarantine

    @gc_step(task_id=task_id, pool=S3_POOL, **task_kwargs)
    def purge(step: Step) -> QuarantinePurge:
        return purge_quarantine(step.conn, step.capped_s3, step.run)

    return purge


def purge_owed_cache_keys(task_id: str = "purge_cache_keys", **task_kwargs: Any):
    """The step that unlinks the Redis keys the DAG owes (one pipelined round trip per claimed group of rows)."""
    from blobgc.core.cache_purge import PurgeResult
    from blobgc.core.cache_purge import purge_owed_cache_keys as purge

    @gc_step(task_id=task_id, **task_kwargs)
    def purge_cache_keys(step: Step) -> PurgeResult:
        return purge(step.conn, step.redis, step.run)

    return purge_cache_keys


def report_run(
    task_id: str = "report",
    *,
    outlets: list | None = None,
    skip_dry_run: bool = False,
    extra_counters: tuple[str, ...] = (),
    summaries: dict[str, Callable[[psycopg.Connection, RunRef], dict]] | None = None,
    trigger_rule: str | None = None,
    **parts: type[TaskResult],
):
    """The step that finishes the run's report: `parts` name the upstream results it gathers and their types.

    A mapped upstream's results (a list) are summed; `summaries` add figures a collector reads back from
    its own tables (name -> function of the connection and the run). The run's totals go to `blobgc.run`
    (and so to `blobgc.reclaim_daily`); its metrics are emitted once (`emit_run_metrics`), with the
    named `extra_counters` taken from the gathered figures. With `skip_dry_run`, a dry run's report
    ends skipped, so its `outlets` (an Asset that schedules a deleting DAG) are not emitted.

    The report is downstream of each upstream it is given, and reads their results itself: an upstream
    skipped in this run (a dry run's drain, say) has none, and counts as zero. Passed to the task as
    XCom arguments, each such absence was fetched one by one and logged as an error ("XCom not found").
    """
    return report_parts(
        parts,
        task_id,
        outlets=outlets,
        skip_dry_run=skip_dry_run,
        extra_counters=extra_counters,
        summaries=summaries,
        trigger_rule=trigger_rule,
    )


def report_parts(
    parts: Mapping[str, type[TaskResult]],
    task_id: str = "report",
    *,
    outlets: list | None = None,
    skip_dry_run: bool = False,
    extra_counters: tuple[str, ...] = (),
    summaries: dict[str, Callable[[psycopg.Connection, RunRef], dict]] | None = None,
    trigger_rule: str | None = None,
):
    """`report_run` with its parts as a mapping (name -> result type), for a builder that names them from data."""
    task_kwargs: dict[str, Any] = {"task_id": task_id}
    if trigger_rule is not None:  # "none_failed": a plan the gate refused still gets its report
        task_kwargs["trigger_rule"] = trigger_rule
    if outlets is not None:
        task_kwargs["outlets"] = outlets

    def report(step: Step, sources: dict[str, list] | None = None) -> dict[str, Any]:
        from airflow.sdk import get_current_context

        ti = get_current_context()["ti"]
        details: dict[str, Any] = {}
        for name, kind in parts.items():
            upstream_id, mapped = (sources or {}).get(name, (None, False))
            # every map index's result of this run, in one call that finds "none" quietly; [None] when none
            found = [v for v in ti.xcom_pull(task_ids=[upstream_id]) if v is not None] if upstream_id else []
            if mapped:  # its results, one per mapped task
                details[name] = kind.total(found)
            else:
                details[name] = kind.from_xcom(found[0] if found else None).to_xcom()
        for name, summarize in (summaries or {}).items():
            details[name] = summarize(step.conn, step.run)
        counters = {c: sum(int(d.get(c, 0)) for d in details.values() if isinstance(d, dict)) for c in extra_counters}
        try:  # the dollars shown beside the bytes; a bad Variable is said, and never costs the run its report
            sync_storage_prices(step.conn)
        except ConfigurationError as error:
            log.error("%s: the storage prices were not updated", error)
            details["storage_prices_error"] = str(error)
        finished = finish_dag_run(step.conn, step.run, details, counters)
        if skip_dry_run and step.run.dry_run:
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"dry run: reported, and nothing downstream is triggered: {finished}")
        return finished

    reporting = gc_step(**task_kwargs)(report)

    def wire(**upstream: Any) -> Any:
        """The report task, after each upstream result it gathers (XComArgs, by the names of `parts`)."""
        sources = {name: [arg.operator.task_id, arg.operator.is_mapped] for name, arg in upstream.items()}
        reported = reporting(sources=sources)
        for arg in upstream.values():
            arg.operator >> reported.operator
        return reported

    return wire


def finish_dag_run(
    conn: psycopg.Connection,
    run: RunRef,
    details: dict[str, Any] | None = None,
    extra_counters: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Stamp the run finished with its report, emit its metrics, and return its totals (with what is still owed)."""
    totals = finish_run(conn, run, details)
    owed, _bytes, _attempts, parked = owed_summary(conn, run.dag_id)
    emit_run_metrics(run, totals, owed, parked, extra_counters)
    return {**totals, "owed": owed, "parked": parked, **(details or {})}


def emit_run_metrics(
    run: RunRef, totals: dict[str, Any], owed: int, parked: int = 0, extra_counters: dict[str, int] | None = None
) -> None:
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
        log.warning("could not emit blobgc metrics for %s: %s", run.dag_id, error)
