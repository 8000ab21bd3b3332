"""The alerts' test kit: a real SMTP server (aiosmtpd) on a free local port that keeps what it receives, and
Variables and connections set on the stack itself, through Airflow's REST API, for the processes of the stack (the
triggerer runs deadline callbacks) that do not see a test's AIRFLOW_VAR_* and AIRFLOW_CONN_* environment."""
from __future__ import annotations

import contextlib
import email
import email.policy
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from aiosmtpd.controller import Controller

from tests.helpers import AIRFLOW_API, airflow_api, airflow_token


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MailBox:
    """An aiosmtpd handler that keeps every message it receives."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []
        self.recipients: list[list[str]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages.append(email.message_from_bytes(envelope.original_content, policy=email.policy.default))
        self.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"

    def wait_for(self, count: int, timeout: float, *, where: Callable[[email.message.EmailMessage], bool] | None = None
                 ) -> list[email.message.EmailMessage]:
        """The messages (those `where` accepts), once there are `count` of them or `timeout` seconds have passed."""
        deadline = time.monotonic() + timeout
        while True:
            found = [m for m in self.messages if where is None or where(m)]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


EXTRA = {"disable_ssl": True, "disable_tls": True, "from_email": "blobgc@example.com", "retry_limit": 0, "timeout": 10}


@dataclass
class SmtpServer:
    port: int
    mailbox: MailBox

    @property
    def connection(self) -> str:
        """An SMTP connection to it (plain SMTP on localhost: no SSL, no STARTTLS), as AIRFLOW_CONN_* JSON."""
        return json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": self.port, "extra": EXTRA})

    def rest_connection(self, conn_id: str) -> dict[str, Any]:
        """The same connection, as the REST API's /api/v2/connections takes it."""
        return {"connection_id": conn_id, "conn_type": "smtp", "host": "127.0.0.1", "port": self.port,
                "extra": json.dumps(EXTRA)}


@contextlib.contextmanager
def smtp_server_running() -> Iterator[SmtpServer]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1, on a free port, for the block (a test's `smtp_server` fixture)."""
    mailbox = MailBox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield SmtpServer(port, mailbox)
    finally:
        controller.stop()


# ------------------------------------------------------------------------------------ the stack's own settings
def _delete(path: str) -> None:
    """DELETE on the running api-server's REST API (204, no body); a 404 (nothing there) is no error."""
    request = urllib.request.Request(AIRFLOW_API + path, method="DELETE",
                                     headers={"Authorization": f"Bearer {airflow_token()}"})
    try:
        with urllib.request.urlopen(request, timeout=30):
            pass
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise


def _existing(path: str) -> dict | None:
    try:
        return airflow_api(path)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


@contextlib.contextmanager
def stack_variable(key: str, value: str) -> Iterator[None]:
    """Variable `key` set in the stack's metadata database for the block (as `airflow variables set` sets it), and
    put back as it was afterwards (deleted, or its earlier value)."""
    path = f"/api/v2/variables/{urllib.parse.quote(key, safe='')}"
    earlier = _existing(path)
    if earlier is None:
        airflow_api("/api/v2/variables", method="POST", body={"key": key, "value": value})
    else:
        airflow_api(path, method="PATCH", body={"key": key, "value": value})
    try:
        yield
    finally:
        if earlier is None:
            _delete(path)
        else:
            airflow_api(path, method="PATCH", body={"key": key, "value": earlier["value"]})


@contextlib.contextmanager
def stack_connection(connection: dict[str, Any]) -> Iterator[None]:
    """A connection (the REST API's body) of the test's own in the stack's metadata database, for the block."""
    path = f"/api/v2/connections/{urllib.parse.quote(connection['connection_id'], safe='')}"
    _delete(path)  # a leftover of an interrupted session
    airflow_api("/api/v2/connections", method="POST", body=connection)
    try:
        yield
    finally:
        _delete(path)


# Variable blobgc_notify on the stack: the deadline tests set it there (the triggerer reads it), and a run made in a
# test's own process reads it too. The failure-alert tests, which expect it unset or set by their own environment,
# take this lock shared; a test that sets it on the stack takes it alone (tests.helpers.dag_lock, any name).
NOTIFY_VARIABLE_LOCK = "blobgc_notify.variable"
