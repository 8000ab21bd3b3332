"""The gate's policy: when a run's plan is unusual enough that a person must approve it.

`judge` compares a plan's objects, rows and bytes, whole and per collection, with `ratio` x the trailing median
of the DAG's last `history` real runs, past floors so that small runs never wait (`GateSettings`, Variable
`blobgc_gate`). `record_judgement` keeps the judgement and the decision in `blobgc.gate_decision`.

The decision is enforced where a plan is executed, not here: `blobgc.core.plans.check_may_execute` refuses every
item of a plan whose run the gate has not let through (`passed` or `approved`), or whose plan expired meanwhile,
whoever asks (a DAG's task, one cleared by hand, a test, a bench). A DAG's gate task asks a person through Airflow
(`blobgc.dag_kit.gate`); a caller outside Airflow names who approves (`let_through`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import psycopg

from blobgc.core import queries
from blobgc.core.plans import (
    APPROVED,
    PASSED,
    PLAN_MAX_AGE_HOURS,
    PlanSize,
    check_fresh,
    gate_decision,
    plan_of,
    plan_size,
)
from blobgc.core.runs import RunRef
from blobgc.core.settings import ConfigurationError
from blobgc.core.sizes import human_bytes

GATE_DEFAULTS: dict[str, float] = {"ratio": 5, "min_objects": 1000, "min_bytes": 1073741824, "history": 10}


@dataclass(frozen=True)
class GateSettings:
    """Variable blobgc_gate: wait past `ratio` x the median of the last `history` real runs, and past the floors."""

    ratio: float = 5
    min_objects: int = 1000
    min_bytes: int = 1073741824
    history: int = 10

    @classmethod
    def parse(cls, raw: Any) -> GateSettings:
        if raw in (None, ""):
            return cls()
        if not isinstance(raw, dict):
            raise ConfigurationError(
                'Variable blobgc_gate must be a JSON object such as {"ratio": 5, "min_objects": '
                f'1000, "min_bytes": 1073741824, "history": 10}}, not {raw!r}'
            )
        unknown = set(raw) - set(GATE_DEFAULTS)
        if unknown:
            raise ConfigurationError(
                f"Variable blobgc_gate: unknown field(s) {sorted(unknown)}; it takes {sorted(GATE_DEFAULTS)}"
            )
        values: dict[str, Any] = {}
        for name, default in GATE_DEFAULTS.items():
            value = raw.get(name, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigurationError(f"Variable blobgc_gate: {name} must be a number, not {value!r}")
            positive = name in ("ratio", "history")
            if value < 0 or (positive and value <= 0):
                raise ConfigurationError(
                    f"Variable blobgc_gate: {name} must be {'> 0' if positive else '>= 0'}, not {value!r}"
                )
            if name != "ratio" and value != int(value):
                raise ConfigurationError(f"Variable blobgc_gate: {name} must be a whole number, not {value!r}")
            values[name] = float(value) if name == "ratio" else int(value)
        return cls(**values)


@dataclass
class Judgement:
    """The gate's comparison of a plan with the history, whole (`scope` "(all)") and per collection."""

    plan_run_id: str
    planned: PlanSize
    settings: GateSettings
    scopes: list[dict[str, Any]] = field(default_factory=list)
    # the run's Param plan_max_age_hours: execution refuses the plan once it is older (`plans.check_may_execute`)
    plan_max_age_hours: float = PLAN_MAX_AGE_HOURS

    @property
    def needs_approval(self) -> bool:
        return any(s["exceeds"] for s in self.scopes)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan_run_id": self.plan_run_id,
            "settings": self.settings.__dict__,
            "scopes": self.scopes,
            "needs_approval": self.needs_approval,
            "plan_max_age_hours": self.plan_max_age_hours,
        }

    def summary(self) -> str:
        """One paragraph per scope, for the approval's body and the logs."""
        lines = []
        for s in self.scopes:
            median = (
                f"the median of the last {s['history_runs']} real runs is {s['median_objects']:,.0f} objects, "
                f"{human_bytes(int(s['median_bytes']))}, {s.get('median_rows', 0):,.0f} rows"
                if s["history_runs"]
                else "there is no history yet"
            )
            lines.append(
                f"- **{s['scope']}**: {s['planned_objects']:,} objects, {human_bytes(s['planned_bytes'])}, "
                f"{s['planned_rows']:,} rows; {median}; the threshold is {s['threshold_objects']:,.0f} "
                f"objects, {human_bytes(int(s['threshold_bytes']))} or {s.get('threshold_rows', 0):,.0f} rows"
                + (" — **exceeded**" if s["exceeds"] else "")
            )
        return "\n".join(lines)


def judge(
    conn: psycopg.Connection, run: RunRef, settings: GateSettings, *, plan_max_age_hours: float = PLAN_MAX_AGE_HOURS
) -> Judgement:
    """Compare `run`'s plan with the trailing median of the DAG's (and each collection's) last real runs.

    A scope exceeds when its planned objects pass max(ratio x median, min_objects), its planned rows pass
    max(ratio x median, min_objects) (rows are counted as objects are, against the same floor: a plan of rows
    whose objects stay in use, as pastes of shared contents, is judged too), or its bytes pass
    max(ratio x median, min_bytes). With no history the median is 0: the floors decide.
    """
    plan_run_id = plan_of(conn, run)
    whole, per = plan_size(conn, run.dag_id, plan_run_id)
    medians = conn.execute(
        queries.load("plans/select_history"),
        {"dag_id": run.dag_id, "run_id": run.run_id, "history": settings.history, "collections": sorted(per)},
    )
    history = {c: (n, mo or 0, mb or 0, mr or 0) for c, n, mo, mb, mr in medians}
    judgement = Judgement(plan_run_id, whole, settings, plan_max_age_hours=plan_max_age_hours)
    for scope, size in [("(all)", whole), *sorted(per.items())]:
        runs, median_objects, median_bytes, median_rows = history.get(None if scope == "(all)" else scope, (0, 0, 0, 0))
        threshold_objects = max(settings.ratio * float(median_objects), settings.min_objects)
        threshold_bytes = max(settings.ratio * float(median_bytes), settings.min_bytes)
        threshold_rows = max(settings.ratio * float(median_rows), settings.min_objects)
        judgement.scopes.append(
            {
                "scope": scope,
                "planned_objects": size.objects,
                "planned_bytes": size.bytes,
                "planned_rows": size.rows,
                "history_runs": int(runs),
                "median_objects": float(median_objects),
                "median_bytes": float(median_bytes),
                "median_rows": float(median_rows),
                "threshold_objects": threshold_objects,
                "threshold_bytes": threshold_bytes,
                "threshold_rows": threshold_rows,
                "exceeds": (
                    size.objects > threshold_objects or size.bytes > threshold_bytes or size.rows > threshold_rows
                ),
            }
        )
    return judgement


def record_judgement(
    conn: psycopg.Connection, run: RunRef, judgement: Judgement, decision: str, decided_by: str | None = None
) -> None:
    with conn.transaction():
        conn.execute(
            queries.load("plans/upsert_gate_decision"),
            {
                "dag_id": run.dag_id,
                "run_id": run.run_id,
                "plan_run_id": judgement.plan_run_id,
                "planned_rows": judgement.planned.rows,
                "planned_objects": judgement.planned.objects,
                "planned_bytes": judgement.planned.bytes,
                "judgement": json.dumps(judgement.to_json()),
                "decision": decision,
                "decided_by": decided_by,
            },
        )


def let_through(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    approved_by: str,
    settings: GateSettings | None = None,
    plan_max_age_hours: float = PLAN_MAX_AGE_HOURS,
) -> str:
    """The gate for a caller outside Airflow (a bench, a test, a script): judge the run's plan and record it
    `passed`, or, past the threshold, `approved` by `approved_by` (who takes that decision, on record). Returns
    the decision. A DAG's gate task (`blobgc.dag_kit.gate`) asks a person instead. A plan judged already keeps its
    decision (a refused one stays refused). A dry run executes nothing and needs no decision: none is recorded."""
    if run.dry_run:
        return PASSED
    earlier = gate_decision(conn, run)
    if earlier is not None:
        return str(earlier["decision"])
    check_fresh(conn, run, plan_of(conn, run), plan_max_age_hours)
    judgement = judge(conn, run, settings or GateSettings(), plan_max_age_hours=plan_max_age_hours)
    decision = APPROVED if judgement.needs_approval and not run.dry_run else PASSED
    record_judgement(conn, run, judgement, decision, approved_by if decision == APPROVED else None)
    return decision
