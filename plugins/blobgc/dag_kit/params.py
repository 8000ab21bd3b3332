"""What every blobgc DAG declares the same way: pools, default task arguments, and the deleting DAGs' Params.

docs/reference.md §4: every DAG that deletes anything takes `dry_run` (false) and `batch_size` (1000, at most
1000), and its own grace Param. Deployment knobs are read from the environment when DAG files are
parsed (never from the metadata database): BLOBGC_TASK_RETRIES (default 3) and
BLOBGC_RETRY_DELAY_SECONDS (default 30, doubled per retry). Every task's `on_failure_callback` is blobgc's
failure notifier (`notify`), which reads Variable `blobgc_notify` only when a task fails. A DAG that Variable
`blobgc_deadlines` names declares its deadline (`deadlines`: read when the DAG file is parsed).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

S3_POOL = "blobgc_s3"  # S3 batch deletes and listings
HTTP_POOL = "blobgc_http"  # the crawler's downloads

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def dag_defaults(dag_id: str) -> dict[str, Any]:
    """What every blobgc DAG declares the same way: no catch-up, one run at a time, the default task
    arguments, and **paused upon creation**, whatever the deployment's `dags_are_paused_at_creation`:
    a DAG that deletes must be switched on by a person, after a dry run. When Variable `blobgc_deadlines` names
    `dag_id`, its deadline too (`deadlines.dag_deadline`; a malformed Variable declares none, and each DAG's first
    task fails naming it)."""
    from blobgc.dag_kit.deadlines import dag_deadline

    defaults: dict[str, Any] = {
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": 1,
        "default_args": default_args(),
        "is_paused_upon_creation": True,
    }
    if (deadline := dag_deadline(dag_id)) is not None:
        defaults["deadline"] = deadline
    return defaults


def default_args() -> dict[str, Any]:
    """Every blobgc task's defaults, read from the environment each time a DAG file is parsed, and the failure
    alert (`notify.BlobgcFailureNotifier`: Variable `blobgc_notify`, read when a task fails)."""
    from blobgc.dag_kit.notify import failure_notifier

    return {
        "owner": "blobgc",
        "retries": int(os.environ.get("BLOBGC_TASK_RETRIES", "3")),
        "retry_delay": timedelta(seconds=float(os.environ.get("BLOBGC_RETRY_DELAY_SECONDS", "30"))),
        "retry_exponential_backoff": 2.0,  # 30 s, 60 s, 120 s ...
        "max_retry_delay": timedelta(minutes=15),
        "execution_timeout": timedelta(hours=2),
        "on_failure_callback": failure_notifier(),
    }


def deleting_params(**extra: Any) -> dict[str, Any]:
    """The Params every deleting DAG takes (docs/reference.md §4): dry_run and batch_size, plus `extra`."""
    from airflow.sdk import Param

    return {
        "dry_run": Param(False, type="boolean", description="Report what would be deleted and delete nothing."),
        "batch_size": Param(
            1000,
            type="integer",
            minimum=1,
            maximum=1000,
            description="Rows per transaction and keys per S3 DeleteObjects call (at most 1000).",
        ),
        **extra,
    }


def destructive_params(
    grace_name: str, grace_default: int | None, grace_description: str, *, grace_minimum: int = 0, **extra: Any
) -> dict[str, Any]:
    """`deleting_params` with the DAG's own grace Param (at least `grace_minimum`; a `None` default lets it be
    null, for a grace that each thing collected declares itself unless a run gives one)."""
    from airflow.sdk import Param

    kind: str | list[str] = "integer" if grace_default is not None else ["null", "integer"]
    return deleting_params(
        **{grace_name: Param(grace_default, type=kind, minimum=grace_minimum, description=grace_description)}, **extra
    )


def plan_params() -> dict[str, Any]:
    """The Params of a DAG whose real runs execute a plan behind the gate (`blobgc.core.plans`, `.dag_kit.gate`)."""
    from airflow.sdk import Param

    from blobgc.core.plans import APPROVAL_TIMEOUT_HOURS, PLAN_MAX_AGE_HOURS

    return {
        "from_plan": Param(
            None,
            type=["null", "string"],
            description="Execute exactly the plan of this dry run (its run id) instead of planning "
            "anew. Every item is re-checked; what is referenced again is skipped.",
        ),
        "plan_max_age_hours": Param(
            PLAN_MAX_AGE_HOURS,
            type="number",
            exclusiveMinimum=0,
            description="A plan older than this is refused (from_plan), and a plan that ages "
            "past it while waiting for approval is never executed.",
        ),
        "approval_timeout_hours": Param(
            APPROVAL_TIMEOUT_HOURS,
            type="number",
            exclusiveMinimum=0,
            description="How long the gate waits for a person to approve an unusual "
            "deletion (Variable blobgc_gate) before it deletes nothing.",
        ),
    }
