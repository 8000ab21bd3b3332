"""The gate on unusual deletions: a real run waits for a person when its plan is far past the DAG's usual.

`deletion_gate()` is an Airflow 3 human-in-the-loop `ApprovalOperator` that asks only when it must. It sits
between a DAG's planning tasks and the tasks that delete:

1. It judges the run's plan (`blobgc.core.gate.judge`) against Variable `blobgc_gate`: the plan's objects,
   rows and bytes, whole and per collection, against `ratio` x the trailing median of the DAG's last
   `history` real runs, with floors (`min_objects` for objects and for rows, `min_bytes`) so that small runs
   never wait.
2. Under the threshold, or on a dry run, it records `passed` and the run goes on at once.
3. Past it, it records `waiting` and parks in Airflow's *awaiting input* state. The UI's Required Actions
   page (or `PATCH /api/v2/dags/{dag}/dagRuns/{run}/taskInstances/gate/-1/hitlDetails`) shows the plan's
   summary and a link to its receipt, with Approve and Reject.
4. Approve: the run executes exactly that plan. Reject, or no answer within Param
   `approval_timeout_hours` (default 12): the delete steps are skipped, nothing is deleted, and the
   report says why. Every decision is kept in `blobgc.gate_decision` with who made it.

The decision is enforced where plans are executed (`blobgc.core.plans.check_may_execute`, before the first
item of any part, whoever executes it), so clearing a skipped delete task by hand never deletes a rejected
plan, nor one that expired while it waited.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from blobgc.core.gate import GateSettings, judge, record_judgement
from blobgc.core.plans import (
    APPROVAL_TIMEOUT_HOURS,
    APPROVED,
    GOES_ON,
    PASSED,
    REJECTED,
    TIMED_OUT,
    WAITING,
    check_fresh,
    gate_decision,
    plan_max_age,
    plan_of,
    record_decision,
)
from blobgc.core.runs import RunRef, ensure_run
from blobgc.core.sizes import human_bytes
from blobgc.dag_kit.connections import pg_connection
from blobgc.dag_kit.variables import variable

log = logging.getLogger(__name__)


def gate_settings() -> GateSettings:
    """Variable blobgc_gate, checked (ConfigurationError names the field)."""
    return GateSettings.parse(variable("blobgc_gate", None, json_value=True))


def receipt_url(path: str) -> str:
    """`path` (a receipt page's, from the api-server's root) on the api-server's public URL ([api] base_url)."""
    from airflow.sdk.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/") + path


def run_of(context: dict[str, Any]) -> RunRef:
    params = context["params"]
    return RunRef(dag_id=context["dag_run"].dag_id, run_id=context["run_id"], dry_run=bool(params.get("dry_run")))


def responder(event: dict[str, Any]) -> str | None:
    user = event.get("responded_by_user") or {}
    return (user.get("name") or user.get("id")) if isinstance(user, dict) else str(user)


def deletion_gate(task_id: str = "gate", *, receipt_path: Callable[[str, str], str], **kwargs: Any):
    """The gate task (see the module docstring); place it between planning and deleting. `receipt_path(dag_id,
    run_id)` is the receipt page's path, handed down from where the reclaim page's routes are defined
    (`blobgc.reclaim.routes.receipt_path`): the plan a person is asked about is linked there."""
    from airflow.providers.standard.operators.hitl import ApprovalOperator
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from blobgc.core.settings import ConfigurationError

    class DeletionGate(ApprovalOperator):
        """Judge the run's plan; ask a person only when it is unusual (`blobgc.dag_kit.gate`)."""

        def execute(self, context: Any) -> Any:
            run = run_of(context)
            params = context["params"]
            try:
                try:
                    settings = gate_settings()
                except ConfigurationError as error:
                    if not run.dry_run:
                        raise
                    # a dry run never waits: it says what is wrong, judges by the defaults, and still makes its plan
                    log.error("%s (this dry run judges its plan by the defaults; a real run would fail here)", error)
                    settings = GateSettings()
                with pg_connection() as conn:
                    run = ensure_run(conn, run)
                    earlier = gate_decision(conn, run)
                    if earlier is not None and earlier["decision"] in GOES_ON:
                        log.info("the gate already let this run through (%s)", earlier["decision"])
                        return {"decision": earlier["decision"]}
                    if earlier is not None and earlier["decision"] in (REJECTED, TIMED_OUT):
                        raise AirflowSkipException(
                            f"this run's plan was {earlier['decision']}"
                            f"{' by ' + earlier['decided_by'] if earlier['decided_by'] else ''}"
                            ": nothing is deleted"
                        )
                    check_fresh(conn, run, plan_of(conn, run), plan_max_age(params))
                    judgement = judge(conn, run, settings, plan_max_age_hours=plan_max_age(params))
                    log.info(
                        "the plan of %s: %s objects, %s\n%s",
                        judgement.plan_run_id,
                        f"{judgement.planned.objects:,}",
                        human_bytes(judgement.planned.bytes),
                        judgement.summary(),
                    )
                    if run.dry_run or not judgement.needs_approval:
                        record_judgement(conn, run, judgement, PASSED)
                        if run.dry_run and judgement.needs_approval:
                            log.info("a real run of this plan would wait for approval; a dry run never waits")
                        return {"decision": PASSED, "needs_approval": judgement.needs_approval}
                    record_judgement(conn, run, judgement, WAITING)
            except ConfigurationError as error:
                raise AirflowFailException(str(error)) from error
            hours = float(params.get("approval_timeout_hours", APPROVAL_TIMEOUT_HOURS))
            self.response_timeout = timedelta(hours=hours)
            planned = judgement.planned
            self.subject = (
                f"Approve {run.dag_id} deleting {planned.objects:,} objects "
                f"({human_bytes(planned.bytes)}) and {planned.rows:,} rows?"
            )
            plan_link = receipt_url(receipt_path(run.dag_id, judgement.plan_run_id))
            self.body = (
                f"Run `{run.run_id}` of **{run.dag_id}** plans to delete **{planned.objects:,} objects** "
                f"({human_bytes(planned.bytes)}) and {planned.rows:,} rows: past the gate's threshold "
                f"(Variable `blobgc_gate`).\n\n{judgement.summary()}\n\n"
                f"The plan, key by key: [{plan_link}]({plan_link})\n\n"
                f"**Approve** deletes exactly this plan, re-checking every item. **Reject** deletes nothing. "
                f"Without an answer within {hours:g} h, nothing is deleted."
            )
            log.info("waiting for a person to approve or reject (%s h at most): %s", f"{hours:g}", plan_link)
            return super().execute(context)

        def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
            run = run_of(context)
            chosen = list(event.get("chosen_options") or [])
            if "error" in event:
                decision, by = TIMED_OUT, None
            elif event.get("timedout"):
                decision, by = TIMED_OUT, None
            else:
                decision, by = (APPROVED if chosen == [self.APPROVE] else REJECTED), responder(event)
            with pg_connection() as conn:
                record_decision(conn, run, decision, by)
            if decision == TIMED_OUT:
                log.warning("no one answered within the timeout: nothing is deleted")
                if "error" in event:
                    raise AirflowSkipException("no one answered within the timeout: nothing is deleted")
            return super().execute_complete(context, event)

    return DeletionGate(
        task_id=task_id,
        subject="Approve this deletion?",
        defaults=[ApprovalOperator.REJECT],  # no answer in time: nothing is deleted
        response_timeout=timedelta(hours=APPROVAL_TIMEOUT_HOURS),
        **kwargs,
    )
