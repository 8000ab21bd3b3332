"""Deadline alerts (Variable `blobgc_deadlines`): a run past its deadline mails the channels of `blobgc_notify`.

The end-to-end tests run a sweep in this process (`run_dag`), as the other DAG tests do, with the Variable in the
environment when the DAG file is parsed. The rest is the stack's: its scheduler marks the deadline missed and its
triggerer runs the callback, which reads Variable `blobgc_notify` and the SMTP connection from the metadata database
(set through the REST API here) and mails a real SMTP server in this process.
"""
from __future__ import annotations

import asyncio
import html
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.deadlines import (
    DataIntervalEnd,
    DeadlineAlertNotSent,
    DeadlineMissedAlert,
    dag_deadline,
    deadline_missed,
    human_duration,
    parse_deadlines,
)
from blobgc.dag_kit.params import dag_defaults
from tests.helpers import ROOT, locks_at_once, make_blobs, run_dag, set_unused_since
from tests.support.gate import SMALL_GATE, env
from tests.support.mail import (
    NOTIFY_VARIABLE_LOCK,
    SmtpServer,
    smtp_server_running,
    stack_connection,
    stack_variable,
)

SWEEP = "blobgc_sweep"
SMTP_CONN = "blobgc_test_deadline_smtp"
CALLBACK = "blobgc.dag_kit.deadlines.deadline_missed"


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1, on a free port, for this test only."""
    with smtp_server_running() as server:
        yield server


# ------------------------------------------------------------------------------------------------- the Variable
@pytest.mark.parametrize(("raw", "deadlines"), [
    (None, {}), ("", {}), ("  ", {}), ("{}", {}), ("null", {}),
    ('{"blobgc_sweep": 120}', {"blobgc_sweep": 120}),
    ('{"blobgc_sweep": 90, "blobgc_reconcile": 0.5}', {"blobgc_sweep": 90, "blobgc_reconcile": 0.5}),
    ({"blobgc_mark": 1440}, {"blobgc_mark": 1440}),
])
def test_a_good_variable_gives_minutes_per_dag(raw, deadlines):
    assert parse_deadlines(raw) == deadlines


@pytest.mark.parametrize(("raw", "problem"), [
    ('{"blobgc_sweep": 120', "is not valid JSON"),
    ("[120]", "is list [120], not a JSON object"),
    ("120", "is int 120, not a JSON object"),
    ('{"blobgc_sweep": "120"}', 'has "blobgc_sweep": "120", not a number of minutes'),
    ('{"blobgc_sweep": true}', 'has "blobgc_sweep": true, not a number of minutes'),
    ('{"blobgc_sweep": null}', 'has "blobgc_sweep": null, not a number of minutes'),
    ('{"blobgc_sweep": NaN}', 'has "blobgc_sweep": NaN, not a number of minutes'),
    ('{"blobgc_sweep": 0}', 'has "blobgc_sweep": 0: the minutes must be more than 0'),
    ('{"blobgc_sweep": -5}', 'has "blobgc_sweep": -5: the minutes must be more than 0'),
    ('{"": 5}', "has the DAG id '', not a DAG id"),
])
def test_a_malformed_variable_is_refused_naming_it_and_the_fix(raw, problem):
    with pytest.raises(ConfigurationError) as refused:
        parse_deadlines(raw)
    message = str(refused.value)
    assert message.startswith("Variable blobgc_deadlines ") and problem in message, message
    assert 'Fix: set it to a JSON object of DAG id -> minutes after the data interval\'s end' in message
    assert '{"blobgc_sweep": 120, "blobgc_reconcile": 360}' in message


def test_dag_defaults_declare_the_deadline_of_a_dag_the_variable_names_and_none_for_another(monkeypatch):
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_DEADLINES", '{"blobgc_sweep": 90}')
    declared = dag_defaults(SWEEP)["deadline"]
    assert isinstance(declared.reference, DataIntervalEnd)
    assert declared.interval == timedelta(minutes=90)
    assert (declared.callback.path, declared.callback.kwargs) == (CALLBACK, {"minutes": 90})
    assert "deadline" not in dag_defaults("blobgc_mark")
    monkeypatch.delenv("AIRFLOW_VAR_BLOBGC_DEADLINES")
    assert "deadline" not in dag_defaults(SWEEP) and dag_deadline(SWEEP) is None


def parsed(*dag_ids: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The DAGs of dags/<dag_id>.py, parsed as the dag-processor parses them: (dags, import errors)."""
    from airflow.dag_processing.dagbag import DagBag

    dags: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for dag_id in dag_ids:
        bag = DagBag(dag_folder=str(ROOT / "dags" / f"{dag_id}.py"))
        dags.update(bag.dags)
        errors.update(bag.import_errors)
    return dags, errors


def test_the_dag_files_declare_the_variables_deadlines_when_parsed(monkeypatch):
    """The builder's DAGs (the sweep) and the DAG files that call dag_defaults themselves (the crawler) alike."""
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_DEADLINES", '{"blobgc_sweep": 120, "blobgc_crawler": 15}')
    dags, errors = parsed(SWEEP, "blobgc_crawler", "blobgc_mark")
    assert errors == {}
    (sweep,), (crawler,) = dags[SWEEP].deadline, dags["blobgc_crawler"].deadline  # a DAG keeps a list
    assert (sweep.interval, crawler.interval) == (timedelta(minutes=120), timedelta(minutes=15))
    assert isinstance(sweep.reference, DataIntervalEnd) and isinstance(crawler.reference, DataIntervalEnd)
    assert not dags["blobgc_mark"].deadline


def test_a_malformed_variable_keeps_the_dags_and_fails_their_first_task_naming_it(monkeypatch, bucket):
    """The DAGs stay in Airflow (no deadline declared), and a run's first task fails at once, without retries,
    naming the Variable and the fix: nothing of the run is done."""
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_DEADLINES", '{"blobgc_sweep": "2h"}')
    dags, errors = parsed(SWEEP, "blobgc_crawler")
    assert errors == {} and not dags[SWEEP].deadline and not dags["blobgc_crawler"].deadline
    result = run_dag(SWEEP, env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket,
                                       "AIRFLOW_VAR_BLOBGC_DEADLINES": '{"blobgc_sweep": "2h"}'})
    assert result.returncode == 1 and result.task_states["plan_shards"] == "failed"
    assert 'Variable blobgc_deadlines has "blobgc_sweep": "2h", not a number' in result.output


def test_the_plugin_registers_the_reference_for_the_processes_that_create_runs():
    from airflow.plugins_manager import get_deadline_references_plugins
    from airflow.serialization.decoders import decode_deadline_alert
    from airflow.serialization.encoders import encode_deadline_alert

    assert get_deadline_references_plugins()["blobgc.dag_kit.deadlines.DataIntervalEnd"] is DataIntervalEnd
    alert = decode_deadline_alert(encode_deadline_alert(dag_deadline_of(SWEEP, 30)))  # as the scheduler reads it
    assert isinstance(alert.reference.inner_ref, DataIntervalEnd) and alert.interval == timedelta(minutes=30)


def dag_deadline_of(dag_id: str, minutes: float) -> Any:
    import os

    os.environ["AIRFLOW_VAR_BLOBGC_DEADLINES"] = json.dumps({dag_id: minutes})
    try:
        return dag_deadline(dag_id)
    finally:
        del os.environ["AIRFLOW_VAR_BLOBGC_DEADLINES"]


def test_dag_test_reads_an_encoded_alert_as_its_row_apache_airflow_73428():
    """`DAG.test()` keeps the encoded alerts where the scheduler keeps their rows' ids: a successful run looks them
    up to drop its deadline, which `airflow dags test` can do once a DAG with a deadline was parsed."""
    from airflow.models.deadline_alert import DeadlineAlert as DeadlineAlertRow
    from airflow.serialization.definitions.deadline import SerializedReferenceModels
    from airflow.serialization.encoders import encode_deadline_alert

    encoded = encode_deadline_alert(dag_deadline_of(SWEEP, 30))  # dag_deadline installs the repair
    row = DeadlineAlertRow.get_by_id(encoded)
    assert row.reference_class is SerializedReferenceModels.SerializedCustomReference
    assert row.reference == encoded["reference"] and row.callback_def == encoded["callback"]


# -------------------------------------------------------------------------------------- the reference, evaluated
class OneRow:
    """A session whose query finds one run's (data_interval_end, run_after, run_type), or none."""

    def __init__(self, row: tuple | None):
        self.row = row

    def execute(self, statement: Any) -> Any:
        return SimpleNamespace(one_or_none=lambda: self.row)


END, AFTER = datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 2, 0, 5, tzinfo=UTC)


@pytest.mark.parametrize(("row", "reference"), [
    ((END, AFTER, "scheduled"), END),  # the data interval's end
    ((None, AFTER, "manual"), AFTER),  # a manual run without a logical date has no data interval: run_after
    ((END, AFTER, "backfill"), None),  # a backfill's data intervals ended long ago: no deadline
    (None, None),
])
def test_the_reference_is_the_data_intervals_end_or_run_after(row, reference):
    assert DataIntervalEnd()._evaluate_with(session=OneRow(row), dag_id=SWEEP, run_id="r") == reference


# ---------------------------------------------------------------------------------------------- the alert alone
def deadline_context(*, run_id: str = "manual__2026-03-02T00:05:00+00:00", state: str = "running",
                     deadline: datetime | str = END + timedelta(minutes=120)) -> dict[str, Any]:
    """The context the scheduler gives a deadline's callback (`Deadline.handle_miss`)."""
    return {"dag_run": {"dag_id": SWEEP, "dag_run_id": run_id, "state": state, "data_interval_end": END.isoformat(),
                        "run_after": AFTER.isoformat(), "logical_date": END.isoformat()},
            "deadline": {"id": "0193a0c4-0000-7000-8000-000000000000", "deadline_time": deadline}}


def test_the_alert_names_the_dag_the_run_the_deadline_and_how_late_with_the_runs_link():
    now = END + timedelta(minutes=120, seconds=185)
    alert = DeadlineMissedAlert.from_context(deadline_context(run_id="manual__<x>&y"), minutes=120, now=now)
    assert alert.subject == ("[blobgc] blobgc_sweep: run manual__<x>&y missed its deadline 2026-03-02 02:00:00 UTC "
                             "(3 min 5 s late)")
    url = "http://localhost:8080/dags/blobgc_sweep/runs/manual__%3Cx%3E%26y"
    assert alert.url == url
    assert f"Run: {url}" in alert.text
    assert ("Deadline: 2026-03-02 02:00:00 UTC (120 min after the data interval's end, 2026-03-02 00:00:00 UTC)"
            in alert.text)
    assert "manual__&lt;x&gt;&amp;y" in alert.html and f'href="{url}"' in alert.html
    assert alert.payload["late_seconds"] == 185 and alert.payload["event"] == "deadline_missed"


def test_a_run_with_no_data_interval_counts_from_run_after():
    context = deadline_context(deadline=(AFTER + timedelta(minutes=10)).isoformat())
    context["dag_run"]["data_interval_end"] = None
    alert = DeadlineMissedAlert.from_context(context, minutes=10, now=AFTER + timedelta(hours=3))
    assert alert.due == "2026-03-02 00:15:00 UTC (10 min after run_after (the run has no data interval), " \
                        "2026-03-02 00:05:00 UTC)"
    assert "(2 h 50 min late)" in alert.subject


@pytest.mark.parametrize(("seconds", "text"), [(0, "0 s"), (59, "59 s"), (185, "3 min 5 s"), (7800, "2 h 10 min"),
                                               (3 * 86400 + 4 * 3600 + 5, "3 d 4 h"), (-3, "0 s")])
def test_human_duration(seconds, text):
    assert human_duration(timedelta(seconds=seconds)) == text


def test_the_callback_mails_the_channels_of_blobgc_notify(monkeypatch, smtp_server):
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_NOTIFY", json.dumps({"email": {"to": ["oncall@example.com"],
                                                                          "smtp_conn_id": SMTP_CONN}}))
    monkeypatch.setenv(f"AIRFLOW_CONN_{SMTP_CONN.upper()}", smtp_server.connection)
    result = asyncio.run(deadline_missed(context=deadline_context(), minutes=120))
    assert result == ("the deadline alert for blobgc_sweep (run manual__2026-03-02T00:05:00+00:00) was sent through "
                      "email")  # text: Airflow keeps it in a text column
    (mail,) = smtp_server.mailbox.messages
    assert smtp_server.mailbox.recipients == [["oncall@example.com"]]
    assert str(mail["Subject"]).startswith("[blobgc] blobgc_sweep: run manual__2026-03-02T00:05:00+00:00 missed its "
                                           "deadline 2026-03-02 02:00:00 UTC (")


def test_no_channel_no_mail(monkeypatch, caplog):
    monkeypatch.delenv("AIRFLOW_VAR_BLOBGC_NOTIFY", raising=False)
    with caplog.at_level(logging.INFO, logger="blobgc.dag_kit.deadlines"):
        assert asyncio.run(deadline_missed(context=deadline_context(), minutes=120)).endswith(
            "was not sent: no channel is set")
    assert "Variable blobgc_notify names no channel" in caplog.text


def test_a_bad_channel_is_logged_naming_it_and_the_others_are_still_sent(monkeypatch, caplog):
    from tests.support.mail import MailBox, free_port

    received: list[dict] = []

    class Posted:  # the HTTP provider's notifier, as far as the alert uses it
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

        def notify(self, context: Any) -> None:
            received.append(self.kwargs["json"])

    import airflow.providers.http.notifications.http as http_notifications

    monkeypatch.setattr(http_notifications, "HttpNotifier", Posted)
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_NOTIFY", json.dumps({
        "email": {"to": "oncall@example.com", "smtp_conn_id": SMTP_CONN}, "webhook": {"http_conn_id": "hooks"}}))
    monkeypatch.setenv(f"AIRFLOW_CONN_{SMTP_CONN.upper()}", SmtpServer(free_port(), MailBox()).connection)  # no one
    with caplog.at_level(logging.INFO, logger="blobgc.dag_kit.deadlines"), \
            pytest.raises(DeadlineAlertNotSent, match=r"could not be sent through email \(sent: webhook\)"):
        asyncio.run(deadline_missed(context=deadline_context(), minutes=120))
    assert "the email deadline alert of Variable blobgc_notify could not be sent for blobgc_sweep" in caplog.text
    assert [p["run_id"] for p in received] == ["manual__2026-03-02T00:05:00+00:00"]


def test_a_malformed_notify_variable_is_logged_naming_it(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_NOTIFY", '{"pager": {}}')
    with caplog.at_level(logging.INFO, logger="blobgc.dag_kit.deadlines"), pytest.raises(ConfigurationError):
        asyncio.run(deadline_missed(context=deadline_context(), minutes=120))
    assert "no deadline alert sent for blobgc_sweep (run manual__2026-03-02T00:05:00+00:00): Variable " \
           "blobgc_notify has unknown channel(s) pager" in caplog.text


# ------------------------------------------------------------------------------------------------- end to end
def triggerers_alive() -> list[Any]:
    """The stack's triggerers that heartbeat (the Job table): they run the deadlines' callbacks."""
    from airflow.jobs.job import Job
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        jobs = session.scalars(select(Job).where(Job.job_type == "TriggererJob", Job.state == "running")).all()
        return [(job.id, job.hostname) for job in jobs if job.is_alive()]


@dataclass
class StackMails:
    server: SmtpServer
    run_ended: Callable[[], None]  # lets blobgc_sweep's lock go, once the test's run has ended

    @property
    def mailbox(self) -> Any:
        return self.server.mailbox


@pytest.fixture
def stack_mails_to(smtp_server) -> Iterator[StackMails]:
    """Variable blobgc_notify mailing `smtp_server`, and its SMTP connection, set on the stack for the test (the
    triggerer reads them there), with the failure-alert tests, which expect it unset, held off meanwhile
    (NOTIFY_VARIABLE_LOCK), and blobgc_sweep's lock until the test's run has ended (`run_ended`): no other
    worker writes a version of the DAG without the deadline as the run starts. Both are taken at once, so that the
    failure-alert tests are not held off while this waits for the sweep's lock. Any other run that alerts this
    server meanwhile is not counted: the tests count only the mails that name their own run."""
    assert triggerers_alive(), "the stack's triggerer is not running (no live TriggererJob): run `make up`"
    setting = json.dumps({"email": {"to": ["oncall@example.com"], "smtp_conn_id": SMTP_CONN}})
    with locks_at_once([NOTIFY_VARIABLE_LOCK, SWEEP]) as let_go, \
            stack_connection(smtp_server.rest_connection(SMTP_CONN)), stack_variable("blobgc_notify", setting):
        yield StackMails(smtp_server, lambda: let_go(SWEEP))


def deadlines_of(run_id: str) -> list[Any]:
    """The run's rows of Airflow's deadline table: (deadline_time, missed, callback state), with the run's
    data_interval_end and end_date."""
    from airflow.models.callback import Callback
    from airflow.models.dagrun import DagRun
    from airflow.models.deadline import Deadline
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return list(session.execute(
            select(Deadline.deadline_time, Deadline.missed, Callback.state, DagRun.data_interval_end, DagRun.end_date)
            .join(DagRun, Deadline.dagrun_id == DagRun.id).join(Callback, Deadline.callback_id == Callback.id)
            .where(DagRun.dag_id == SWEEP, DagRun.run_id == run_id)).all())


def declared_deadlines(run_id: str) -> list[Any]:
    """The deadline alerts of the DAG version the run was created with: (name, interval)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.deadline_alert import DeadlineAlert
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return list(session.execute(
            select(DeadlineAlert.name, DeadlineAlert.interval)
            .join(SerializedDagModel, DeadlineAlert.serialized_dag_id == SerializedDagModel.id)
            .join(DagRun, DagRun.created_dag_version_id == SerializedDagModel.dag_version_id)
            .where(DagRun.dag_id == SWEEP, DagRun.run_id == run_id)).all())


def callback_done(run_id: str, timeout: float) -> list[Any]:
    """The run's deadlines, once their callbacks have ended (or `timeout` seconds have passed)."""
    end = time.monotonic() + timeout
    while True:
        rows = deadlines_of(run_id)
        if (rows and all(row.state in ("success", "failed") for row in rows)) or time.monotonic() > end:
            return rows
        time.sleep(0.5)


def test_a_deadline_passed_sends_one_mail(conn, s3, bucket, stack_mails_to):
    """A sweep whose gate waits for a person (about 11 s, nobody answers) passes its deadline, 6 s after its data
    interval's end, while it is still running: the scheduler marks it missed and the triggerer mails once."""
    ids = make_blobs(conn, s3, bucket, 10)  # 20 objects: 10x the median of the history below, so the gate waits
    set_unused_since(conn, ids, "3 days")
    with conn.transaction():
        for i, n in enumerate([2, 2, 3, 1, 2]):
            conn.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run, started_at, finished_at, objects_deleted, "
                         "bytes_reclaimed, rows_deleted) VALUES (%s, %s, false, now() - %s * interval '1 day', "
                         "now() - %s * interval '1 day', %s, %s, %s)",
                         (SWEEP, f"scheduled__history_{i}", i + 1, i + 1, n, n * 100, n // 2))
    run = run_dag(SWEEP, conf={"approval_timeout_hours": 0.003}, env_extra=env(
        bucket, AIRFLOW_VAR_BLOBGC_GATE=SMALL_GATE, AIRFLOW_VAR_BLOBGC_DEADLINES=json.dumps({SWEEP: 0.1})))
    stack_mails_to.run_ended()
    assert run.returncode == 0, run.output[-3000:]
    assert run.task_states["gate"] == "success" and run.task_states["delete_unused_blobs"] == "skipped"

    mailbox = stack_mails_to.mailbox

    def about_the_run(mail: Any) -> bool:  # a session's earlier runs may have late callbacks of their own
        return run.run_id in str(mail["Subject"])

    mails = mailbox.wait_for(1, timeout=90, where=about_the_run)
    rows = callback_done(run.run_id, timeout=30)
    assert len(rows) == 1, rows
    deadline = rows[0]
    assert deadline.deadline_time == deadline.data_interval_end + timedelta(seconds=6)  # the data interval's end
    assert deadline.deadline_time < deadline.end_date  # it passed while the run was going
    assert deadline.missed, deadline
    assert len(mails) == 1 and deadline.state == "success", (deadline, [str(m["Subject"]) for m in mailbox.messages])
    time.sleep(10)  # long enough for a second mail, were one sent
    mails = [m for m in mailbox.messages if about_the_run(m)]
    assert len(mails) == 1, [str(m["Subject"]) for m in mails]

    (mail,) = mails
    assert mailbox.recipients[mailbox.messages.index(mail)] == ["oncall@example.com"]
    subject = str(mail["Subject"])
    assert subject.startswith(f"[blobgc] {SWEEP}: run {run.run_id} missed its deadline "), subject
    assert deadline.deadline_time.strftime("%Y-%m-%d %H:%M:%S UTC") in subject and " late)" in subject
    body = html.unescape(mail.get_body(("html",)).get_content())
    assert SWEEP in body and run.run_id in body and "0.1 min after the data interval's end" in body
    assert "/dags/blobgc_sweep/runs/" in body


def test_a_run_that_finishes_before_its_deadline_sends_no_mail(conn, bucket, stack_mails_to):
    """Nothing to sweep: the run succeeds within seconds, long before its deadline (30 s after the data interval's
    end), and Airflow drops the deadline; nothing is mailed, even after the deadline has passed."""
    run = run_dag(SWEEP, env_extra=env(bucket, AIRFLOW_VAR_BLOBGC_DEADLINES=json.dumps({SWEEP: 0.5})))
    stack_mails_to.run_ended()
    assert run.returncode == 0, run.output[-3000:]
    assert declared_deadlines(run.run_id) == [
        ("blobgc_deadlines: 0.5 min after the data interval's end", {"__classname__": "datetime.timedelta",
                                                                      "__version__": 2, "__data__": 30.0})]
    assert deadlines_of(run.run_id) == []  # the run succeeded in time: its deadline was dropped
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        dag_run = session.query(DagRun).filter_by(dag_id=SWEEP, run_id=run.run_id).one()
        due = dag_run.data_interval_end + timedelta(seconds=30)
        assert dag_run.end_date < due, "the run did not finish within its 30 s: a slow machine, not the deadline"
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 10)  # past the deadline, and then some
    assert [str(m["Subject"]) for m in stack_mails_to.mailbox.messages if run.run_id in str(m["Subject"])] == []
