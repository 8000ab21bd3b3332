"""Guard rails on the primary: every statement of a task runs under `statement_timeout` and `lock_timeout`.

Variable `blobgc_db_timeouts` (JSON, optional) sets them: `{"statement_timeout": "30min", "lock_timeout": "1min"}`
(PostgreSQL's units: ms, s, min, h, d; a bare number is milliseconds; 0 turns one off). The defaults keep a batch
statement that has gone wrong from holding the application's rows for hours, and a statement waiting on the
application's locks from waiting forever. A statement they cancel fails its task with `StatementTimedOut`, naming
the statement (its file under blobgc/sql/) and the setting; it is not a setting error, so Airflow retries the task,
which goes on from its last checkpoint (each step commits batch by batch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from blobgc.core.queries import name_of
from blobgc.core.settings import ConfigurationError

VARIABLE = "blobgc_db_timeouts"
DEFAULTS = {"statement_timeout": "30min", "lock_timeout": "1min"}


class StatementTimedOut(RuntimeError):
    """A statement cancelled by `statement_timeout` or `lock_timeout`: the task fails, and its retry goes on."""


@dataclass(frozen=True)
class Timeouts:
    statement_timeout: str = DEFAULTS["statement_timeout"]
    lock_timeout: str = DEFAULTS["lock_timeout"]

    @classmethod
    def parse(cls, value: Any) -> Timeouts:
        """The Variable's value (parsed JSON, or None: unset)."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping) or not set(value) <= set(DEFAULTS):
            raise ConfigurationError(
                f"Variable {VARIABLE} must be a JSON object with statement_timeout and/or lock_timeout, in "
                f'PostgreSQL\'s units, e.g. {{"statement_timeout": "30min", "lock_timeout": "1min"}}; got {value!r}'
            )
        for name, setting in value.items():
            if isinstance(setting, bool) or not isinstance(setting, str | int):
                raise ConfigurationError(
                    f'Variable {VARIABLE}: {name} is {setting!r}, not a duration ("30s", "10min", or milliseconds)'
                )
        return cls(**{**DEFAULTS, **{k: str(v) for k, v in value.items()}})

    def apply(self, conn: psycopg.Connection) -> None:
        """Set both on `conn` (its session); a value PostgreSQL refuses raises ConfigurationError naming it."""
        try:
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false)",
                (self.statement_timeout, self.lock_timeout),
            )
        except psycopg.errors.DataError as error:
            raise ConfigurationError(f"Variable {VARIABLE}: PostgreSQL refuses {self}: {str(error).strip()}") from error


def timed_out(error: BaseException) -> StatementTimedOut | None:
    """The task's failure for a statement `statement_timeout` or `lock_timeout` cancelled, naming both; None for any
    other error (a cancel by an operator is not a timeout)."""
    if isinstance(error, psycopg.errors.LockNotAvailable):
        setting = "lock_timeout"
    elif isinstance(error, psycopg.errors.QueryCanceled) and "statement timeout" in str(error):
        setting = "statement_timeout"
    else:
        return None
    statement = getattr(error, "blobgc_statement", None)
    what = name_of(statement) if statement is not None else "a statement"
    said = str(error).strip().splitlines()[0]  # PostgreSQL's first line; the rest points into the statement
    return StatementTimedOut(
        f"{what} was cancelled by {setting} ({said}). Variable {VARIABLE} sets it (default "
        f"{DEFAULTS[setting]}): raise it if the statement is slow by nature, or find what held it up (a long "
        "transaction of the application, a lock). The task's retry goes on from its last checkpoint."
    )
