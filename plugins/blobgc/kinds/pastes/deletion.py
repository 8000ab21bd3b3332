"""Seed 002's paste expiry as a planned deletion (`blobgc.engine.Deletion`), which its DAG `blobgc_paste_expiry` is
built from: repair the ref_counts, cut the due pastes into ranges of content_hash, plan each range, execute each
part, then the objects and the short codes in Redis are drained."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from blobgc.core.results import TaskResult
from blobgc.engine import Deletion, Reported, Tasks, Work
from blobgc.kinds.pastes import expiry
from blobgc.kinds.pastes.expiry import DriftReport, ExpiryExecution, PlannedExpiry


@dataclass(frozen=True)
class PasteExpiry(Deletion):
    """`bucket` and `redis_prefix` read the settings when a step runs (Variables, in a DAG)."""

    bucket: Callable[[], str]
    redis_prefix: Callable[[], str]

    tasks = Tasks(prepare="check_ref_counts", shards="expiry_ranges", plan="plan_expiry", execute="expire_pastes")
    reported = Reported(
        planned={"planned": PlannedExpiry},
        prepared=("ref_counts", DriftReport),
        executed=("expired", ExpiryExecution),
    )
    cache_keys = True
    drain_when_nothing_executed = True  # earlier runs' debts are drained even when this run's plan is empty
    labels = {
        "plan_expiry": "contents {{ (task.op_kwargs['shard']['lo'] or 'start')[:8] }}.."
        "{{ (task.op_kwargs['shard']['hi'] or 'end')[:8] }}",
        "expire_pastes": "{% set p = task.op_kwargs['part']['part'] %}{% if p.startswith('contents ') %}"
        "{% set r = p[9:].split('..') %}contents {{ r[0][:8] }}..{{ r[1][:8] }}{% else %}{{ p }}{% endif %}",
    }

    def prepare(self, work: Work, *, plans: bool) -> TaskResult:
        """Repair `app.content.ref_count` drift (the count of pastes is the truth); a run that plans itself plans
        the contents left with no paste (part *orphan contents*)."""
        return expiry.check_ref_counts(
            work.conn, work.run, bucket=self.bucket(), batch_size=work.params["batch_size"], plan_orphans=plans
        )

    def shards(self, work: Work, prepared: dict[str, Any] | None) -> list[dict[str, Any]]:
        # a retry may cut other ranges: take back the old ones (none once the gate judged the plan: it is kept)
        if not expiry.restart_expiry_plan(work.conn, work.run):
            return []
        ranges = expiry.split_expiry_contents(work.conn, work.cutoff(), work.params["expiry_workers"])
        return [{"lo": lo, "hi": hi} for lo, hi in ranges]

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        return expiry.plan_expiry(
            work.conn,
            work.run,
            expired_before=work.cutoff(),  # due before the run's reference time
            bucket=self.bucket(),
            batch_size=work.params["batch_size"],
            content_range=(shard.get("lo"), shard.get("hi")),
        )

    def execute(self, work: Work, part: dict[str, Any] | None) -> TaskResult:
        assert part is not None
        return expiry.execute_expiry_part(work.conn, work.run, part=part["part"], redis_prefix=self.redis_prefix())
