"""Failure alerts: every blobgc task's `on_failure_callback`, configured by Variable `blobgc_notify`.

The Variable is read when a task fails (never at DAG-parse time), so a change takes effect at the next
failure, with no re-parse. Its value (README, "Alerts when a cleanup fails") is unset, empty, `{}` or
`"none"` for no alerts, or a JSON object with one entry per channel:

    {"email": {"to": ["oncall@example.com"], "smtp_conn_id": "smtp_default", "from_email": "blobgc@example.com"},
     "slack": {"slack_webhook_conn_id": "blobgc_slack"},
     "webhook": {"http_conn_id": "blobgc_alerts", "endpoint": "/hooks/blobgc"}}

Each channel is sent through its provider's own notifier (SMTP's `SmtpNotifier`, Slack's
`SlackWebhookNotifier`, HTTP's `HttpNotifier`); addresses, tokens and URLs stay in Airflow connections.
An alert names the DAG, the task (and map index), the run, the try, the exception and a link to the
task's log in the Airflow UI (`[api] base_url`). Nothing here can change the task's outcome: a malformed
Variable, a missing provider or an unreachable server is logged, naming `blobgc_notify`, and the task
stays failed as it was. `check_notify_variable` validates the Variable up front: every DAG's first
task calls it (`gc_step`), and fails, deleting nothing, on a malformed value or a missing provider.
"""

from __future__ import annotations

import html
import importlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow.sdk import BaseNotifier

from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

VARIABLE = "blobgc_notify"
EXPECTED = (
    'unset, empty, {} or "none" for no alerts, or a JSON object with any of '
    '"email": {"to": [addresses], "smtp_conn_id": ..., "from_email": ..., "cc": [...], "bcc": [...]}, '
    '"slack": {"slack_webhook_conn_id": ...}, '
    '"webhook": {"http_conn_id": ..., "endpoint": ..., "headers": {...}}'
)
EXCEPTION_CHARS = 2000  # of the exception's text in an alert; the log has all of it
WHAT_NEXT = "Fix the cause, then clear the task to re-run it: every blobgc task is idempotent."


@dataclass(frozen=True)
class EmailAlert:
    """Mail through the SMTP provider (`smtp_conn_id` None: `[email] email_conn_id`, else `smtp_default`)."""

    to: tuple[str, ...]
    smtp_conn_id: str | None = None
    from_email: str | None = None  # None: the connection's `from_email` extra
    cc: tuple[str, ...] = ()
    bcc: tuple[str, ...] = ()
    kind = "email"
    provider = ("airflow.providers.smtp.notifications.smtp", "SmtpNotifier", "apache-airflow-providers-smtp")


@dataclass(frozen=True)
class SlackAlert:
    """A Slack incoming webhook, whose URL is the `slack_webhook_conn_id` connection's."""

    slack_webhook_conn_id: str
    kind = "slack"
    provider = (
        "airflow.providers.slack.notifications.slack_webhook",
        "SlackWebhookNotifier",
        "apache-airflow-providers-slack",
    )


@dataclass(frozen=True)
class WebhookAlert:
    """A JSON POST to the `http_conn_id` connection's URL (host) plus `endpoint`."""

    http_conn_id: str
    endpoint: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    kind = "webhook"
    provider = ("airflow.providers.http.notifications.http", "HttpNotifier", "apache-airflow-providers-http")


Channel = EmailAlert | SlackAlert | WebhookAlert


def _problem(what: str) -> ConfigurationError:
    return ConfigurationError(f"Variable {VARIABLE} {what}; expected {EXPECTED}")


def _text(section: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _problem(f"has {section}.{name} {value!r}, not a non-empty string")
    return value


def _addresses(section: str, name: str, value: Any, *, required: bool) -> tuple[str, ...]:
    if value is None and not required:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(a, str) and "@" in a for a in items):
        raise _problem(f"has {section}.{name} {value!r}, not an address or a non-empty list of addresses")
    return tuple(items)


def _section(setting: dict[str, Any], name: str, allowed: set[str]) -> dict[str, Any] | None:
    section = setting.get(name)
    if section is None:
        return None
    if not isinstance(section, dict):
        raise _problem(f'has "{name}": {section!r}, not an object')
    if unknown := sorted(set(section) - allowed):
        raise _problem(f"has unknown {name} field(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")
    return section


def parse_notify_setting(raw: str | dict[str, Any] | None) -> list[Channel]:
    """The channels a `blobgc_notify` value asks for ([] for none); ConfigurationError names what is wrong."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none", "null")):
        return []
    setting: Any = raw
    if isinstance(raw, str):
        try:
            setting = json.loads(raw)
        except json.JSONDecodeError as error:
            raise _problem(f"is not valid JSON ({error})") from error
    if setting is None or setting == {} or (isinstance(setting, str) and setting.strip().lower() == "none"):
        return []
    if not isinstance(setting, dict):
        raise _problem(f"is {type(setting).__name__} {setting!r}, not an object")
    if unknown := sorted(set(setting) - {"email", "slack", "webhook"}):
        raise _problem(f"has unknown channel(s) {', '.join(unknown)}")
    channels: list[Channel] = []
    if (email := _section(setting, "email", {"to", "smtp_conn_id", "from_email", "cc", "bcc"})) is not None:
        channels.append(
            EmailAlert(
                to=_addresses("email", "to", email.get("to"), required=True),
                smtp_conn_id=_text("email", "smtp_conn_id", email["smtp_conn_id"]) if "smtp_conn_id" in email else None,
                from_email=_text("email", "from_email", email["from_email"]) if "from_email" in email else None,
                cc=_addresses("email", "cc", email.get("cc"), required=False),
                bcc=_addresses("email", "bcc", email.get("bcc"), required=False),
            )
        )
    if (slack := _section(setting, "slack", {"slack_webhook_conn_id"})) is not None:
        channels.append(SlackAlert(_text("slack", "slack_webhook_conn_id", slack.get("slack_webhook_conn_id"))))
    if (hook := _section(setting, "webhook", {"http_conn_id", "endpoint", "headers"})) is not None:
        headers = hook.get("headers") or {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise _problem(f"has webhook.headers {headers!r}, not an object of strings")
        channels.append(
            WebhookAlert(
                http_conn_id=_text("webhook", "http_conn_id", hook.get("http_conn_id")),
                endpoint=_text("webhook", "endpoint", hook["endpoint"]) if hook.get("endpoint") is not None else None,
                headers=dict(headers),
            )
        )
    return channels


def notify_channels() -> list[Channel]:
    """The channels Variable `blobgc_notify` names now (read at each call, inside a task or callback)."""
    from blobgc.dag_kit.variables import variable

    return parse_notify_setting(variable(VARIABLE, None))


def notifier_class(channel: Channel) -> type[BaseNotifier]:
    """The provider's notifier class for `channel`; ConfigurationError names the package to install."""
    module, name, package = channel.provider
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as error:
        raise ConfigurationError(
            f"Variable {VARIABLE} asks for {channel.kind} alerts, but {package} is not "
            f"installed ({error}): pip install {package}"
        ) from error


def check_notify_variable() -> list[Channel]:
    """Fail early (ConfigurationError) on a malformed `blobgc_notify` or a channel whose provider is missing."""
    channels = notify_channels()
    for channel in channels:
        notifier_class(channel)
    return channels


@dataclass(frozen=True)
class FailureAlert:
    """What an alert says about one failed task instance."""

    dag_id: str
    task: str  # task id, with "[map index]" (and its rendered name) when mapped
    run_id: str
    try_number: int | None
    tries: int | None  # 1 + retries
    exception: str
    log_url: str | None
    hostname: str | None = None

    @classmethod
    def from_context(cls, context: Any) -> FailureAlert:
        """From the context Airflow passes to `on_failure_callback` (task runner's or dag-processor's)."""
        ti = context["ti"]
        task = ti.task_id
        map_index = getattr(ti, "map_index", None)
        if map_index is not None and map_index >= 0:
            task = f"{task}[{map_index}]"
            if rendered := getattr(ti, "rendered_map_index", None):
                task = f"{task} ({rendered})"
        error = context.get("exception")
        if error is None:
            exception = "no exception was reported (the task may have been killed or timed out: see its log)"
        elif isinstance(error, BaseException):
            exception = f"{type(error).__name__}: {error}"
        else:
            exception = str(error)
        if len(exception) > EXCEPTION_CHARS:
            exception = exception[:EXCEPTION_CHARS] + " ... (truncated: see the log)"
        max_tries = getattr(ti, "max_tries", None)
        try:
            log_url = ti.log_url
        except Exception:  # noqa: BLE001 - a TI without one still gets an alert
            log_url = None
        return cls(
            dag_id=ti.dag_id,
            task=task,
            run_id=ti.run_id,
            try_number=getattr(ti, "try_number", None),
            tries=max_tries + 1 if isinstance(max_tries, int) else None,
            exception=exception,
            log_url=log_url,
            hostname=getattr(ti, "hostname", None) or None,
        )

    @property
    def attempt(self) -> str:
        if self.try_number is None:
            return "unknown"
        return f"{self.try_number} of {self.tries}" if self.tries else str(self.try_number)

    @property
    def subject(self) -> str:
        return f"[blobgc] {self.dag_id}: task {self.task} failed (run {self.run_id}, try {self.attempt})"

    @property
    def text(self) -> str:
        """Plain text, for Slack and webhooks."""
        return "\n".join(
            [
                f"blobgc: task {self.task} of DAG {self.dag_id} failed.",
                f"Run: {self.run_id}",
                f"Try: {self.attempt}",
                f"Exception: {self.exception}",
                f"Log: {self.log_url or '(no log link)'}",
                WHAT_NEXT,
            ]
        )

    @property
    def html(self) -> str:
        """The mail's body."""
        rows = [
            ("DAG", self.dag_id),
            ("Task", self.task),
            ("Run", self.run_id),
            ("Try", self.attempt),
            ("Host", self.hostname or ""),
            ("Exception", self.exception),
        ]
        intro = f"blobgc: task <b>{html.escape(self.task)}</b> of DAG <b>{html.escape(self.dag_id)}</b> failed."
        return alert_html(intro, rows, ("Log", self.log_url, "(no log link)"), WHAT_NEXT)

    @property
    def payload(self) -> dict[str, Any]:
        """The webhook's JSON body (`text` for chat services that show only that)."""
        return {
            "text": self.text,
            "dag_id": self.dag_id,
            "task": self.task,
            "run_id": self.run_id,
            "try": self.attempt,
            "exception": self.exception,
            "log_url": self.log_url,
        }


def alert_html(intro: str, rows: list[tuple[str, str]], link: tuple[str, str | None, str], what_next: str) -> str:
    """An alert mail's body, for every kind of alert: `intro` (HTML, its values escaped by the caller), a table of
    `rows` (label, text: escaped here), a last row linking to `link`'s URL (label, URL, what to show without one),
    and what to do next."""
    label, url, missing = link
    cells = "".join(f"<tr><th align='left'>{name}</th><td>{html.escape(value)}</td></tr>" for name, value in rows)
    target = f'<a href="{html.escape(url, quote=True)}">{html.escape(url)}</a>' if url else missing
    return (
        f"<p>{intro}</p><table>{cells}<tr><th align='left'>{label}</th><td>{target}</td></tr></table>"
        f"<p>{html.escape(what_next)}</p>"
    )


class Alert(Protocol):
    """What a channel sends: a failed task's `FailureAlert`, or a late run's `deadlines.DeadlineMissedAlert`."""

    @property
    def subject(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def html(self) -> str: ...

    @property
    def payload(self) -> dict[str, Any]: ...


def channel_notifier(channel: Channel, alert: Alert) -> BaseNotifier:
    """The provider's notifier that sends `alert` through `channel`."""
    cls: Any = notifier_class(channel)
    if isinstance(channel, EmailAlert):
        return cls(
            to=list(channel.to),
            from_email=channel.from_email,
            smtp_conn_id=channel.smtp_conn_id,
            subject=alert.subject,
            html_content=alert.html,
            cc=list(channel.cc) or None,
            bcc=list(channel.bcc) or None,
        )
    if isinstance(channel, SlackAlert):
        return cls(slack_webhook_conn_id=channel.slack_webhook_conn_id, text=alert.text)
    return cls(
        http_conn_id=channel.http_conn_id,
        endpoint=channel.endpoint,
        json=alert.payload,
        headers={"Content-Type": "application/json", **channel.headers},
        extra_options={"timeout": 30},
    )


class BlobgcFailureNotifier(BaseNotifier):
    """`on_failure_callback` of every blobgc task: alerts the channels of Variable `blobgc_notify`, read now."""

    def notify(self, context: Any) -> None:
        """Send the alert through each channel; log, never raise (the task has failed already, and stays so)."""
        try:
            channels = notify_channels()
        except ConfigurationError as error:
            log.error("no failure alert sent: %s", error)
            return
        except Exception:  # noqa: BLE001 - a Variable that cannot even be read must not mask the task's failure
            log.exception("no failure alert sent: Variable %s could not be read", VARIABLE)
            return
        if not channels:
            log.info("no failure alert sent: Variable %s names no channel", VARIABLE)
            return
        alert = FailureAlert.from_context(context)
        send_alert(alert, channels, context, kind="failure", about=f"{alert.dag_id}.{alert.task} (run {alert.run_id})")


def send_alert(
    alert: Alert, channels: list[Channel], context: Any, *, kind: str, about: str
) -> tuple[list[str], list[str]]:
    """Send `alert` (a `kind` alert `about` a task or run) through each of `channels`: one that fails is logged,
    naming it, and the others are still sent. Returns the kinds of channel sent and failed."""
    sent: list[str] = []
    failed: list[str] = []
    for channel in channels:
        try:
            # notify(), not __call__: the alert's text is final, never rendered as a Jinja template
            channel_notifier(channel, alert).notify(context)
        except ConfigurationError as error:
            log.error("no %s %s alert sent for %s: %s", channel.kind, kind, about, error)
            failed.append(channel.kind)
        except Exception:  # noqa: BLE001 - one bad channel must not keep the others from sending
            log.exception(
                "the %s %s alert of Variable %s could not be sent for %s (%s)",
                channel.kind,
                kind,
                VARIABLE,
                about,
                channel,
            )
            failed.append(channel.kind)
        else:
            log.info("sent the %s %s alert for %s", channel.kind, kind, about)
            sent.append(channel.kind)
    return sent, failed


def failure_notifier() -> BlobgcFailureNotifier:
    """The notifier `default_args()` gives every blobgc task (it reads nothing until a task fails)."""
    return BlobgcFailureNotifier()
