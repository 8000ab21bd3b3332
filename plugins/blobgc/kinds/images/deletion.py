"""Seed 001's rotten-image cleaner as a planned deletion (`blobgc.engine.Deletion`), which its DAG
`blobgc_image_cleanup` is built from: plan the unbound photos past their grace, then execute the whole plan once;
the drain deletes their files."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from blobgc.core.results import TaskResult
from blobgc.engine import Deletion, Reported, Tasks, Work
from blobgc.kinds.images import cleanup
from blobgc.kinds.images.cleanup import CleanupExecution, CleanupResult


@dataclass(frozen=True)
class ImageCleanup(Deletion):
    """`bucket` and `sizes` read the settings when a step runs (Variables, in a DAG)."""

    bucket: Callable[[], str]
    sizes: Callable[[], dict[str, int]]

    tasks = Tasks(plan="plan_unbound_images", execute="delete_unbound_images")
    reported = Reported(planned={"planned": CleanupResult}, executed=("images", CleanupExecution))
    mapped = False  # one plan, executed by one task

    def grace_cutoff(self, work: Work) -> datetime:
        return work.cutoff(days=work.params["grace_days"])

    def preflight(self) -> tuple[Callable[[], object], ...]:
        return (self.sizes,)  # a bad Variable blobgc_image_sizes fails the run before anything is written

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        return cleanup.plan_unbound_images(
            work.conn,
            work.run,
            cutoff=self.grace_cutoff(work),
            bucket=self.bucket(),
            size_names=self.sizes(),
            batch_size=work.params["batch_size"],
        )

    def execute(self, work: Work, part: dict[str, Any] | None) -> TaskResult:
        return cleanup.execute_image_plan(work.conn, work.run, cutoff=self.grace_cutoff(work))
