"""Failure alerts (Variable `blobgc_notify`): a failed sweep mails a local SMTP server and posts to a local webhook."""
from __future__ import annotations

import json
import logging
import sys
import threading
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from airflow.sdk import BaseNotifier

from blobgc.core.settings import ConfigurationError
from blobgc.dag_kit.notify import (
    BlobgcFailureNotifier,
    EmailAlert,
    FailureAlert,
    SlackAlert,
    WebhookAlert,
    check_notify_variable,
    parse_notify_setting,
)
from tests.helpers import dag_lock, run_dag
from tests.support.mail import NOTIFY_VARIABLE_LOCK, MailBox, SmtpServer, free_port, smtp_server_running

SMTP_CONN = "blobgc_test_smtp"
WEBHOOK_CONN = "blobgc_test_webhook"
FAILED_TASK = "plan_shards"  # the sweep's first task over the collections file
SLACK_MODULE = "airflow.providers.slack.notifications.slack_webhook"


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1, on a free port, for this test only."""
    with smtp_server_running() as server:
        yield server


class WebhookRequests(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, Any]]]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((self.path, json.loads(body)))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook_server() -> Iterator[tuple[int, list[tuple[str, dict[str, Any]]]]]:
    """A local HTTP server that records the JSON POSTed to it: (port, [(path, body), ...])."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), WebhookRequests)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], server.received  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def webhook_connection(port: int) -> str:
    return json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": port, "schema": "http"})


def bad_collections_file(tmp_path: Path) -> Path:
    """A collections file that fails the sweep's first task (a ConfigurationError: failed at once, no retries)."""
    path = tmp_path / "collections.yaml"
    path.write_text("collections:\n  app_blob:\n    table: app.blob\n    id: id\n    keys: []\n")
    return path


@pytest.fixture(autouse=True)
def notify_variable_unset_on_the_stack() -> Iterator[None]:
    """No deadline test has Variable blobgc_notify set on the stack meanwhile (tests/support/mail.py)."""
    with dag_lock(NOTIFY_VARIABLE_LOCK, shared=True):
        yield


def failing_sweep_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"BLOBGC_COLLECTIONS": str(bad_collections_file(tmp_path)), "AIRFLOW_VAR_BLOBGC_BUCKET": "blobgc", **extra}


def expected_log_url(run_id: str, task_id: str, try_number: int = 1) -> str:
    """The UI's page of a task instance's log, as Airflow 3.3 links it (`[api] base_url`)."""
    from airflow.sdk.configuration import conf

    base = conf.get("api", "base_url", fallback="http://localhost:8080/").rstrip("/")
    return f"{base}/dags/blobgc_sweep/runs/{quote(run_id)}/tasks/{task_id}?try_number={try_number}"


# ------------------------------------------------------------------------------------------------- end to end
def test_a_failed_sweep_mails_dag_task_run_and_log_link_and_posts_the_webhook(conn, tmp_path, smtp_server,
                                                                               webhook_server):
    port, posted = webhook_server
    setting = {"email": {"to": ["oncall@example.com"], "smtp_conn_id": SMTP_CONN},
               "webhook": {"http_conn_id": WEBHOOK_CONN, "endpoint": "/hooks/blobgc"}}
    run = run_dag("blobgc_sweep", env_extra=failing_sweep_env(
        tmp_path, AIRFLOW_VAR_BLOBGC_NOTIFY=json.dumps(setting),
        **{f"AIRFLOW_CONN_{SMTP_CONN.upper()}": smtp_server.connection,
           f"AIRFLOW_CONN_{WEBHOOK_CONN.upper()}": webhook_connection(port)}))
    assert run.returncode == 1 and run.task_states[FAILED_TASK] == "failed", (run.task_states, run.output[-3000:])
    failed = sorted(task for task, state in run.task_states.items() if state == "failed")
    assert failed == [FAILED_TASK], run.task_states

    mails = smtp_server.mailbox.messages
    assert len(mails) == 1, run.output[-3000:]
    mail = mails[0]
    assert smtp_server.mailbox.recipients == [["oncall@example.com"]]
    assert mail["From"] == "blobgc@example.com"
    subject = str(mail["Subject"])
    assert "blobgc_sweep" in subject and FAILED_TASK in subject and run.run_id in subject
    body = mail.get_body(("html",)).get_content()
    log_url = expected_log_url(run.run_id, FAILED_TASK)
    assert "blobgc_sweep" in body and FAILED_TASK in body and run.run_id in body
    assert f'href="{log_url.replace("&", "&amp;")}"' in body
    assert "AirflowFailException" in body and "keys" in body  # the exception, naming the bad field

    assert len(posted) == 1
    path, payload = posted[0]
    assert path == "/hooks/blobgc"
    assert (payload["dag_id"], payload["task"], payload["run_id"], payload["log_url"]) == (
        "blobgc_sweep", FAILED_TASK, run.run_id, log_url)
    assert log_url in payload["text"]


def test_no_variable_no_alert(conn, tmp_path, smtp_server, monkeypatch, caplog):
    monkeypatch.delenv("AIRFLOW_VAR_BLOBGC_NOTIFY", raising=False)
    with caplog.at_level(logging.INFO, logger="blobgc.dag_kit.notify"):
        run = run_dag("blobgc_sweep", env_extra=failing_sweep_env(
            tmp_path, **{f"AIRFLOW_CONN_{SMTP_CONN.upper()}": smtp_server.connection}))
    assert run.returncode == 1 and run.task_states[FAILED_TASK] == "failed", run.task_states
    assert smtp_server.mailbox.messages == []
    assert "no failure alert sent: Variable blobgc_notify names no channel" in caplog.text


def test_malformed_variable_logs_an_error_naming_it_and_leaves_the_failure_as_it_was(conn, tmp_path, smtp_server,
                                                                                      caplog):
    with caplog.at_level(logging.INFO, logger="blobgc.dag_kit.notify"):
        run = run_dag("blobgc_sweep", env_extra=failing_sweep_env(
            tmp_path, AIRFLOW_VAR_BLOBGC_NOTIFY='{"email": {"to": "oncall@example.com"', **{
                f"AIRFLOW_CONN_{SMTP_CONN.upper()}": smtp_server.connection}))
    assert run.returncode == 1 and run.task_states[FAILED_TASK] == "failed", run.task_states
    failed = sorted(task for task, state in run.task_states.items() if state == "failed")
    assert failed == [FAILED_TASK], run.task_states
    assert smtp_server.mailbox.messages == []
    errors = [r.getMessage() for r in caplog.records
              if r.name == "blobgc.dag_kit.notify" and r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "no failure alert sent: Variable blobgc_notify is not valid JSON" in errors[0]
    assert '"email": {"to": [addresses]' in errors[0]  # says what it expects


# ------------------------------------------------------------------------------------- the notifier, called alone
class FakeTaskInstance:
    dag_id, task_id, run_id, map_index, try_number, max_tries = "blobgc_reconcile", "reconcile_shard", "r1", 3, 2, 3
    rendered_map_index, hostname = "images/0", "worker-1"
    log_url = "http://localhost:8080/dags/blobgc_reconcile/runs/r1/tasks/reconcile_shard/mapped/3?try_number=2"


def failure_context() -> dict[str, Any]:
    return {"ti": FakeTaskInstance(), "exception": RuntimeError("S3 said <no> & {{ nothing }}")}


def test_an_unreachable_smtp_server_is_logged_never_raised(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_NOTIFY", json.dumps({"email": {"to": "a@example.com",
                                                                           "smtp_conn_id": SMTP_CONN}}))
    monkeypatch.setenv(f"AIRFLOW_CONN_{SMTP_CONN.upper()}", SmtpServer(free_port(), MailBox()).connection)
    with caplog.at_level(logging.INFO, logger="blobgc.dag_kit.notify"):
        BlobgcFailureNotifier().notify(failure_context())
    assert "the email failure alert of Variable blobgc_notify could not be sent" in caplog.text


def test_a_missing_provider_is_logged_naming_the_package_to_install(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, SLACK_MODULE, None)  # as if apache-airflow-providers-slack were not installed
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_NOTIFY", json.dumps({"slack": {"slack_webhook_conn_id": "s"}}))
    with caplog.at_level(logging.INFO, logger="blobgc.dag_kit.notify"):
        BlobgcFailureNotifier().notify(failure_context())
    assert "apache-airflow-providers-slack is not installed" in caplog.text
    with pytest.raises(ConfigurationError, match="pip install apache-airflow-providers-slack"):
        check_notify_variable()


def test_slack_alerts_go_through_the_slack_providers_webhook_notifier(monkeypatch):
    sent: list[dict[str, Any]] = []

    class SlackWebhookNotifier(BaseNotifier):  # the provider's class, as far as blobgc uses it
        def __init__(self, *, slack_webhook_conn_id: str, text: str) -> None:
            super().__init__()
            self.kwargs = {"slack_webhook_conn_id": slack_webhook_conn_id, "text": text}

        def notify(self, context: Any) -> None:
            sent.append(self.kwargs)

    monkeypatch.setitem(sys.modules, SLACK_MODULE, types.SimpleNamespace(SlackWebhookNotifier=SlackWebhookNotifier))
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_NOTIFY", json.dumps({"slack": {"slack_webhook_conn_id": "blobgc_slack"}}))
    BlobgcFailureNotifier().notify(failure_context())
    assert [k["slack_webhook_conn_id"] for k in sent] == ["blobgc_slack"]
    assert "reconcile_shard[3]" in sent[0]["text"] and FakeTaskInstance.log_url in sent[0]["text"]


def test_the_webhook_posts_the_alert_as_json_to_the_connections_url(monkeypatch, webhook_server):
    port, posted = webhook_server
    monkeypatch.setenv("AIRFLOW_VAR_BLOBGC_NOTIFY", json.dumps({"webhook": {
        "http_conn_id": WEBHOOK_CONN, "endpoint": "/alerts", "headers": {"X-Team": "storage"}}}))
    monkeypatch.setenv(f"AIRFLOW_CONN_{WEBHOOK_CONN.upper()}", webhook_connection(port))
    assert check_notify_variable() == [WebhookAlert(WEBHOOK_CONN, "/alerts", {"X-Team": "storage"})]
    BlobgcFailureNotifier().notify(failure_context())
    assert posted == [("/alerts", {
        "text": posted[0][1]["text"], "dag_id": "blobgc_reconcile", "task": "reconcile_shard[3] (images/0)",
        "run_id": "r1", "try": "2 of 4", "exception": "RuntimeError: S3 said <no> & {{ nothing }}",
        "log_url": FakeTaskInstance.log_url})]


def test_the_alert_names_a_mapped_task_by_index_and_escapes_the_exception_in_html():
    alert = FailureAlert.from_context(failure_context())
    assert alert.task == "reconcile_shard[3] (images/0)"
    assert alert.subject == "[blobgc] blobgc_reconcile: task reconcile_shard[3] (images/0) failed (run r1, try 2 of 4)"
    assert "S3 said &lt;no&gt; &amp; {{ nothing }}" in alert.html
    assert f'href="{FakeTaskInstance.log_url}"' in alert.html


@pytest.mark.parametrize("raw", [None, "", "none", "None", "null", "{}", '"none"'])
def test_unset_empty_or_none_means_no_alerts(raw):
    assert parse_notify_setting(raw) == []


def test_every_channel_parses():
    assert parse_notify_setting(json.dumps({
        "email": {"to": "oncall@example.com", "smtp_conn_id": "smtp_ops", "from_email": "gc@example.com",
                  "cc": ["lead@example.com"]},
        "slack": {"slack_webhook_conn_id": "slack_ops"},
        "webhook": {"http_conn_id": "hooks"}})) == [
        EmailAlert(("oncall@example.com",), "smtp_ops", "gc@example.com", ("lead@example.com",)),
        SlackAlert("slack_ops"), WebhookAlert("hooks")]


@pytest.mark.parametrize(("raw", "problem"), [
    ("[1]", "is list [1], not an object"),
    ('{"pager": {}}', "unknown channel(s) pager"),
    ('{"email": {}}', "email.to None, not an address"),
    ('{"email": {"to": ["oncall"]}}', "email.to ['oncall'], not an address"),
    ('{"email": {"to": "a@example.com", "subject": "x"}}', "unknown email field(s) subject"),
    ('{"slack": "https://hooks.slack.com/x"}', 'has "slack": \'https://hooks.slack.com/x\', not an object'),
    ('{"webhook": {"url": "https://example.com"}}', "unknown webhook field(s) url"),
])
def test_a_malformed_variable_is_refused_naming_it_and_what_it_expects(raw, problem):
    with pytest.raises(ConfigurationError) as refused:
        parse_notify_setting(raw)
    assert str(refused.value).startswith("Variable blobgc_notify ") and problem in str(refused.value)
    assert '"email": {"to": [addresses]' in str(refused.value)


def test_a_malformed_variable_fails_a_dags_first_task_before_it_deletes_anything(conn, s3, bucket):
    """A deployment whose alerts would never arrive learns it at the first run, not at the first real failure."""
    from tests.helpers import make_blobs, set_unused_since

    ids = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, ids, "3 days")
    run = run_dag("blobgc_sweep", env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket,
                                             "AIRFLOW_VAR_BLOBGC_NOTIFY": '{"pager": {}}'})
    assert run.returncode == 1 and run.task_states["plan_shards"] == "failed", run.task_states
    assert "success" not in run.task_states.values(), run.task_states
    assert "Variable blobgc_notify has unknown channel(s) pager" in run.output, run.output[-4000:]
    assert conn.execute("SELECT count(*) FROM app.blob WHERE id = ANY(%s)", (ids,)).fetchone()[0] == 2
