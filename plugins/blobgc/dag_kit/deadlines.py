"""Deadline alerts: Airflow 3's Deadline Alerts for blobgc's DAGs, configured by Variable `blobgc_deadlines`.

The Variable (docs/reference.md §2) is a JSON object of DAG id -> minutes after the run's data interval's end by
which a run must have finished, e.g. `{"blobgc_sweep": 120, "blobgc_reconcile": 360}`. Unset, empty or `{}`: no
deadlines; a DAG it does not name has none. It is read when a DAG file is parsed (`dag_defaults`, through
`dag_deadline`), so a change takes effect at each DAG's next parse; a malformed value fails the parse of every
blobgc DAG with a ConfigurationError naming the Variable and the fix. The dag-processor reads it as any Variable
(the metadata database, through Airflow's API); a process outside Airflow's supervision that parses DAG files
(`airflow dags test`, the tests) sees only AIRFLOW_VAR_BLOBGC_DEADLINES or a secrets backend: there, Airflow's
`Variable.get` does not read the metadata database.

- **When it is due.** Airflow records a run's deadline when it creates the run: the run's data interval's end
  (`DataIntervalEnd`, a custom deadline reference registered by blobgc's plugin, `blobgc.plugin`), or, for a run
  with no data interval (a manual run without a logical date), when it was due to run (`run_after`), plus the
  minutes. A backfill run gets no deadline: its data interval ended long ago, by design.
- **When it is missed.** A run that succeeds by then drops its deadline. Otherwise (still running or queued, or
  failed) the scheduler marks it missed once and queues `deadline_missed` for the triggerer, which sends a
  "deadline missed" alert (`DeadlineMissedAlert`: the DAG, the run, the deadline, how late, the run's state and
  link) through every channel of Variable `blobgc_notify`, read then, as failure alerts go (`blobgc.dag_kit.notify`).
  A channel that fails is logged, naming it, and the other channels are still sent; the callback then fails,
  so Airflow records it as failed.
- **`airflow dags test`.** `repair_dag_test_deadlines` fixes two faults of Airflow 3.3.2's `DAG.test()` with
  deadlines, in the processes that parse a DAG with one.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

# airflow.sdk exports these too, but its type stub (airflow/sdk/__init__.pyi, Airflow 3.3.2) does not name them
from airflow.sdk.definitions.callback import AsyncCallback
from airflow.sdk.definitions.deadline import BaseDeadlineReference, DeadlineAlert

from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.notify import alert_html

log = logging.getLogger(__name__)

VARIABLE = "blobgc_deadlines"
EXAMPLE = '{"blobgc_sweep": 120, "blobgc_reconcile": 360}'
EXPECTED = (
    "a JSON object of DAG id -> minutes after the data interval's end by which a run must have finished "
    f"(a number greater than 0), e.g. {EXAMPLE}; unset it, or set it to {{}}, for no deadlines"
)
WHAT_NEXT = (
    "Open the run to see what holds it up: a gate waiting for a person, a full pool, a throttled store, "
    "a failed task. The deadline is Variable blobgc_deadlines."
)


def _problem(what: str) -> ConfigurationError:
    return ConfigurationError(f"Variable {VARIABLE} {what}. Fix: set it to {EXPECTED}")


def parse_deadlines(raw: str | dict[str, Any] | None) -> dict[str, float]:
    """DAG id -> minutes, from a `blobgc_deadlines` value ({} for none); ConfigurationError names what is wrong."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    setting: Any = raw
    if isinstance(raw, str):
        try:
            setting = json.loads(raw)
        except json.JSONDecodeError as error:
            raise _problem(f"is not valid JSON ({error})") from error
    if setting is None:
        return {}
    if not isinstance(setting, dict):
        raise _problem(f"is {type(setting).__name__} {setting!r}, not a JSON object")
    deadlines: dict[str, float] = {}
    for dag_id, minutes in setting.items():
        if not isinstance(dag_id, str) or not dag_id.strip():
            raise _problem(f"has the DAG id {dag_id!r}, not a DAG id")
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not math.isfinite(minutes):
            raise _problem(f'has "{dag_id}": {json.dumps(minutes)}, not a number of minutes')
        if minutes <= 0:
            raise _problem(f'has "{dag_id}": {json.dumps(minutes)}: the minutes must be more than 0')
        deadlines[dag_id] = minutes
    return deadlines


def deadline_minutes(dag_id: str) -> float | None:
    """The minutes Variable `blobgc_deadlines` gives `dag_id` now (None: no deadline); read at DAG-parse time."""
    from airflow.sdk import Variable

    return parse_deadlines(Variable.get(VARIABLE, default=None)).get(dag_id)


class DataIntervalEnd(BaseDeadlineReference):
    """A run's data interval's end; for a run with no data interval (a manual run without a logical date), when
    it was due to run (`run_after`); none for a backfill run. Evaluated by Airflow when it creates the run.

    Registered by blobgc's plugin (`deadline_references`), where every process that creates runs looks a custom
    reference up. Not with `airflow.sdk.deadline_reference` as well: that only names it on the SDK's
    `DeadlineReference`, which nothing here uses, and logs at every import."""

    required_kwargs = {"dag_id", "run_id"}

    def _evaluate_with(self, *, session: Any, **kwargs: Any) -> datetime | None:
        from airflow.models.dagrun import DagRun
        from airflow.utils.types import DagRunType
        from sqlalchemy import select

        dag_id, run_id = kwargs["dag_id"], kwargs["run_id"]
        row = session.execute(
            select(DagRun.data_interval_end, DagRun.run_after, DagRun.run_type).where(
                DagRun.dag_id == dag_id, DagRun.run_id == run_id
            )
        ).one_or_none()
        if row is None:
            log.warning("no deadline for run %s of %s: no such run", run_id, dag_id)
            return None
        data_interval_end, run_after, run_type = row
        if run_type == DagRunType.BACKFILL_JOB:
            log.info("no deadline for backfill run %s of %s", run_id, dag_id)
            return None
        reference: datetime | None = data_interval_end or run_after
        return reference


def check_deadlines_variable() -> dict[str, float]:
    """Variable blobgc_deadlines, parsed: each DAG's first task reads it, so a malformed value fails the run at once
    (ConfigurationError, naming it and the fix) instead of every DAG file's parse."""
    from airflow.sdk import Variable

    return parse_deadlines(Variable.get(VARIABLE, default=None))


def dag_deadline(dag_id: str) -> DeadlineAlert | None:
    """The DeadlineAlert of `dag_id` when Variable `blobgc_deadlines` names it (`dag_defaults` declares it). A
    malformed Variable declares no deadline and is logged: the DAGs stay in Airflow, and each one's first task
    fails naming it (`check_deadlines_variable`)."""
    try:
        minutes = deadline_minutes(dag_id)
    except ConfigurationError as error:
        log.error("%s: no deadline declared for %s until it is fixed; its runs' first task fails", error, dag_id)
        return None
    if minutes is None:
        return None
    repair_dag_test_deadlines()
    return DeadlineAlert(
        reference=DataIntervalEnd(),
        interval=timedelta(minutes=minutes),
        callback=AsyncCallback(deadline_missed, kwargs={"minutes": minutes}),
        name=f"{VARIABLE}: {minutes:g} min after the data interval's end",
    )


def repair_dag_test_deadlines() -> None:
    """Let `airflow dags test` (`DAG.test()`) run a DAG with a deadline as the scheduler does; two fixes, installed
    in a process that parsed such a DAG (never the scheduler, which parses no DAG file), each doing nothing where
    Airflow works as it should. Remove them once the Airflow pinned here has the fixes.

    - apache/airflow#73428 (fix: apache/airflow#73430): `DAG.test()` runs a DAG deserialized in memory, whose
      `deadline` holds the encoded alerts instead of the ids of their `deadline_alert` rows. When the run succeeds,
      `DagRun.update_state` looks each one up by id to drop the run's deadline, and fails: the command exits 1.
      Here an encoded alert is read as the row it stands for (`update_state` reads only its reference).
    - `DAG.test()` runs the tasks in its own process, which leaves its DagRun detached from the session that
      `update_state` is given: `update_state` drops the deadlines of a run that ended by then before it merges the
      run's new state into that session, so it finds the run unfinished and drops nothing, and the run, although
      it succeeded in time, is alerted as late at its deadline. Here a detached run that succeeded has its
      deadlines dropped once more after `update_state`, with its state merged.
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.deadline import Deadline
    from airflow.models.deadline_alert import DeadlineAlert as DeadlineAlertRow
    from airflow.utils.state import DagRunState
    from sqlalchemy import inspect

    looked_up = DeadlineAlertRow.get_by_id
    if not getattr(looked_up, "repaired_for_dag_test", False):

        def get_by_id(cls: type[DeadlineAlertRow], deadline_alert_id: Any, **kwargs: Any) -> DeadlineAlertRow:
            if isinstance(deadline_alert_id, dict):
                data = deadline_alert_id.get("__var", deadline_alert_id)
                return cls(
                    name=data.get("name"),
                    reference=data["reference"],
                    interval=data["interval"],
                    callback_def=data["callback"],
                )
            return looked_up(deadline_alert_id, **kwargs)

        get_by_id.repaired_for_dag_test = True  # type: ignore[attr-defined]
        DeadlineAlertRow.get_by_id = classmethod(get_by_id)  # type: ignore[method-assign, assignment]

    updated = DagRun.update_state
    if not getattr(updated, "repaired_for_dag_test", False):

        def update_state(self: DagRun, *args: Any, **kwargs: Any) -> Any:
            detached: bool = inspect(self).detached
            result = updated(self, *args, **kwargs)
            session = kwargs.get("session")
            if detached and session is not None and self.state == DagRunState.SUCCESS:
                session.flush()  # the run's state, merged by update_state
                Deadline.prune_deadlines(session=session, conditions={DagRun.id: self.id})
            return result

        update_state.repaired_for_dag_test = True  # type: ignore[attr-defined]
        DagRun.update_state = update_state  # type: ignore[method-assign]


def human_duration(span: timedelta) -> str:
    """`45 s`, `3 min 5 s`, `2 h 10 min`, `3 d 4 h`."""
    seconds = max(0, int(span.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {seconds} s"
    return f"{seconds} s"


def _moment(value: Any) -> datetime | None:
    """A time of the callback's context: a datetime, or ISO text (the run's fields come as JSON)."""
    if value is None or value == "":
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _utc(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "(unknown)"


def run_url(dag_id: str, run_id: str) -> str:
    """The run's page in the Airflow UI (`[api] base_url`), as the failure alert links a task's log."""
    from airflow.sdk.configuration import conf

    base = conf.get("api", "base_url", fallback="http://localhost:8080/").rstrip("/")
    return f"{base}/dags/{dag_id}/runs/{quote(run_id)}"


@dataclass(frozen=True)
class DeadlineMissedAlert:
    """What an alert says about one run past its deadline (sent by the channels of `blobgc.dag_kit.notify`)."""

    dag_id: str
    run_id: str
    state: str | None
    deadline: datetime
    minutes: float | None  # the deadline's minutes after its reference, as the Variable gave them
    reference: datetime | None  # the data interval's end, or run_after for a run with none
    reference_name: str
    late: timedelta  # when the alert was made
    url: str

    @classmethod
    def from_context(cls, context: dict[str, Any], *, minutes: float | None, now: datetime) -> DeadlineMissedAlert:
        """From the context Airflow gives a deadline's callback: `dag_run` (the REST API's DAGRunResponse, as
        JSON) and `deadline` (`id`, `deadline_time`)."""
        run = context.get("dag_run") or {}
        deadline = _moment((context.get("deadline") or {}).get("deadline_time")) or now
        dag_id, run_id = str(run.get("dag_id")), str(run.get("dag_run_id") or run.get("run_id"))
        interval_end = _moment(run.get("data_interval_end"))
        return cls(
            dag_id=dag_id,
            run_id=run_id,
            state=run.get("state"),
            deadline=deadline,
            minutes=minutes,
            reference=interval_end or _moment(run.get("run_after")),
            reference_name="the data interval's end" if interval_end else "run_after (the run has no data interval)",
            late=now - deadline,
            url=run_url(dag_id, run_id),
        )

    @property
    def due(self) -> str:
        after = f"{self.minutes:g} min after {self.reference_name}" if self.minutes is not None else "its deadline"
        return f"{_utc(self.deadline)} ({after}, {_utc(self.reference)})"

    @property
    def subject(self) -> str:
        return (
            f"[blobgc] {self.dag_id}: run {self.run_id} missed its deadline {_utc(self.deadline)} "
            f"({human_duration(self.late)} late)"
        )

    @property
    def text(self) -> str:
        """Plain text, for Slack and webhooks."""
        return "\n".join(
            [
                f"blobgc: run {self.run_id} of DAG {self.dag_id} has not finished by its deadline.",
                f"Deadline: {self.due}",
                f"Late by: {human_duration(self.late)}",
                f"State: {self.state or 'unknown'}",
                f"Run: {self.url}",
                WHAT_NEXT,
            ]
        )

    @property
    def html(self) -> str:
        """The mail's body."""
        rows = [
            ("DAG", self.dag_id),
            ("Run", self.run_id),
            ("Deadline", self.due),
            ("Late by", human_duration(self.late)),
            ("State", self.state or "unknown"),
        ]
        intro = (
            f"blobgc: run <b>{html.escape(self.run_id)}</b> of DAG <b>{html.escape(self.dag_id)}</b> has not "
            "finished by its deadline."
        )
        return alert_html(intro, rows, ("Run", self.url, ""), WHAT_NEXT)

    @property
    def payload(self) -> dict[str, Any]:
        """The webhook's JSON body (`text` for chat services that show only that)."""
        return {
            "text": self.text,
            "event": "deadline_missed",
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "state": self.state,
            "deadline": self.deadline.isoformat(),
            "late_seconds": int(self.late.total_seconds()),
            "run_url": self.url,
        }


class DeadlineAlertNotSent(RuntimeError):
    """Some channel of Variable `blobgc_notify` could not send a deadline alert (each is logged, naming it)."""


def send_deadline_alert(alert: DeadlineMissedAlert, context: Any) -> list[str]:
    """Send `alert` through every channel of Variable `blobgc_notify`, read now; the channels sent ([] for none).

    Blocking (the providers' notifiers): the triggerer runs it in a thread. Every channel is tried; one that
    fails is logged, naming it, and DeadlineAlertNotSent is raised after the others were sent."""
    from blobgc.dag_kit.notify import VARIABLE as NOTIFY_VARIABLE
    from blobgc.dag_kit.notify import notify_channels, send_alert

    what = f"{alert.dag_id} (run {alert.run_id})"
    try:
        channels = notify_channels()
    except Exception as error:  # a malformed Variable, or one that cannot be read: logged, then the callback fails
        log.error("no deadline alert sent for %s: %s", what, error)
        raise
    if not channels:
        log.info("no deadline alert sent for %s: Variable %s names no channel", what, NOTIFY_VARIABLE)
        return []
    sent, failed = send_alert(alert, channels, context, kind="deadline", about=what)
    if failed:
        raise DeadlineAlertNotSent(
            f"the deadline alert for {what} could not be sent through {', '.join(failed)} "
            f"(sent: {', '.join(sent) or 'none'}); see the log above"
        )
    return sent


async def deadline_missed(*, context: dict[str, Any], minutes: float | None = None) -> str:
    """The callback of every blobgc deadline (run in the triggerer): alert the channels of `blobgc_notify`.

    Returns what it sent, as text: Airflow stores a callback's result in a text column (`callback.output`), and
    any other value fails the triggerer's write of it, which stops the triggerer (Airflow 3.3.2)."""
    alert = DeadlineMissedAlert.from_context(context, minutes=minutes, now=datetime.now(UTC))
    log.info("%s of %s missed its deadline %s by %s", alert.run_id, alert.dag_id, alert.due, human_duration(alert.late))
    sent = await asyncio.to_thread(send_deadline_alert, alert, context)
    what = f"the deadline alert for {alert.dag_id} (run {alert.run_id})"
    return f"{what} was sent through {', '.join(sent)}" if sent else f"{what} was not sent: no channel is set"
