"""Seed 003's generation-based GC as a planned deletion (`blobgc.engine.Deletion`), which its DAG
`blobgc_generations` is built from: open the run's generation, plan each collectable generation through its bloom
filter, execute each generation's part; the drain deletes the `mail/` objects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef
from blobgc.engine import Deletion, Reported, Tasks, Work
from blobgc.kinds.generations import collector
from blobgc.kinds.generations.collector import GenerationExecution, GenerationPlan, OpenedGeneration

COLLECT_WORKERS = 2  # connections walking a generation's candidates side by side


@dataclass(frozen=True)
class GenerationCollection(Deletion):
    """`bucket` reads the setting when a step runs (Variable blobgc_bucket, in a DAG)."""

    bucket: Callable[[], str]

    tasks = Tasks(prepare="open_generation", shards="plan_collection", plan="collect", execute="delete_planned_blobs")
    reported = Reported(
        planned={"planned": GenerationPlan},
        prepared=("generation", OpenedGeneration),
        executed=("executed", GenerationExecution),
    )
    drain_when_nothing_executed = True  # earlier runs' debts are drained even when nothing was planned
    labels = {
        "collect": "generation {{ task.op_kwargs['shard']['generation'] }}",
        "delete_planned_blobs": "{{ task.op_kwargs['part']['part'] }}",
    }

    def prepare(self, work: Work, *, plans: bool) -> TaskResult:
        """Open the run's generation (every run does, even one executing a dry run's plan)."""
        return collector.open_generation(work.conn, work.run, plans=plans)

    def shards(self, work: Work, prepared: dict[str, Any] | None) -> list[dict[str, Any]]:
        opened = OpenedGeneration.from_xcom(prepared)
        return [{"generation": g} for g in collector.eligible_generations(work.conn, opened)]

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        return collector.plan_generation(
            work.conn,
            work.run,
            generation=shard["generation"],
            collectable=OpenedGeneration.from_xcom(prepared).collectable,
            bucket=self.bucket(),
            false_positive_rate=work.params["false_positive_rate"],
            batch_size=work.params["batch_size"],
            workers=COLLECT_WORKERS,
            connect=work.connect,
        )

    def execute(self, work: Work, part: dict[str, Any] | None) -> TaskResult:
        assert part is not None
        return collector.execute_plan_part(work.conn, work.run, part=part["part"])

    def summaries(self) -> dict[str, Callable[[psycopg.Connection, RunRef], dict[str, Any]]]:
        return {"collected": collector.summarize}
