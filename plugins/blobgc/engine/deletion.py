"""What a kind of planned deletion is, to the engine: `Deletion`, and the `Work` each of its steps is handed.

A kind implements four methods, each over one unit of work, and the engine (`blobgc.engine.run`) calls them in
order, doing itself what every kind needs done the same way:

    preflight()                      settings read before the run is recorded
    check(work)                      settings and buckets, before the plan is fixed
    prepare(work, plans)             optional: work that comes before planning (a repair, a queue to drain)
    shards(work, prepared)           the plan's shards, each planned by its own task (only for a run that plans)
    plan(work, shard, prepared)      plan one shard: items in the plan store (`blobgc.core.plans`), nothing deleted
    execute(work, part)              execute one part of the plan the gate let through (or the whole plan once)

A kind whose plan is objects alone (no row to delete) has no `execute`: the engine owes the planned objects to
the outbox and the drain deletes them.

The engine fixes the run's plan (or checks Param `from_plan`), refuses inside `execute` a part of a plan the gate
did not let through, whoever calls it, owes and drains the objects and cache keys, and reports. A kind never calls
any of that itself. `Tasks` names the steps as they appear in a DAG (`blobgc.dag_kit.builder` builds one from a
`Deletion`), and `labels` how a mapped task of each is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol

import psycopg

from blobgc.core.replica import PRIMARY, Reads
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, cutoff


class Work(Protocol):
    """What one step of a planned deletion works with: the application database, the run, its Params, the object
    store and Redis (opened when first used), and further database connections for work spread over several.

    A DAG's task hands its `blobgc.dag_kit.Step`; a test or a bench hands a `LocalWork`."""

    conn: psycopg.Connection
    run: RunRef
    params: dict[str, Any]

    def cutoff(self, **grace: float) -> datetime: ...

    @property
    def s3(self) -> Any: ...

    @property
    def redis(self) -> Any: ...

    @property
    def connect(self) -> Callable[[], psycopg.Connection]: ...

    @property
    def reads(self) -> Reads: ...


@dataclass
class LocalWork:
    """`Work` outside Airflow (tests, benches): everything given."""

    conn: psycopg.Connection
    run: RunRef
    params: dict[str, Any] = field(default_factory=dict)
    s3: Any = None
    redis: Any = None
    connector: Callable[[], psycopg.Connection] | None = None
    reader: Reads | None = None  # where candidate scans read: the primary (`conn`) unless a replica's Reads is given

    def cutoff(self, **grace: float) -> datetime:
        return cutoff(self.run, **grace)

    @property
    def reads(self) -> Reads:
        return self.reader if self.reader is not None else Reads(PRIMARY, lambda: self.conn)

    @property
    def connect(self) -> Callable[[], psycopg.Connection]:
        if self.connector is None:
            raise ValueError("this work was given no way to open further connections (LocalWork.connector)")
        return self.connector


@dataclass(frozen=True)
class Tasks:
    """The steps of a kind as a DAG's task ids. `prepare` and `shards` None: the kind has no such step (then the
    first step there is fixes the run's plan). `execute` None: the plan is objects alone, owed to the drain."""

    plan: str
    shards: str | None = None
    prepare: str | None = None
    execute: str | None = None


@dataclass(frozen=True)
class Reported:
    """Under which names the report gathers each step's results, and their types (their XCom is summed over a
    mapped step's tasks). `planned` may name the plan's results more than once (each name with its own type)."""

    planned: dict[str, type[TaskResult]]
    prepared: tuple[str, type[TaskResult]] | None = None
    executed: tuple[str, type[TaskResult]] | None = None


# the first step of a kind: it fixes the run's plan
PREPARE, SHARDS, PLAN = "prepare", "shards", "plan"


class Deletion:
    """A kind of planned deletion (see the module docstring). Subclass it, set `tasks` and `reported`, and
    implement `plan` (and `shards`, `prepare`, `execute` where the kind has them)."""

    tasks: ClassVar[Tasks]
    reported: ClassVar[Reported]
    mapped: ClassVar[bool] = True  # execute: one call per part of the plan (else one over the whole plan)
    lists_objects: ClassVar[bool] = False  # its shards and plans list buckets (they wait for the S3 pool)
    catch_up_drain: ClassVar[bool] = False  # drain earlier runs' debts before this run executes its plan
    cache_keys: ClassVar[bool] = False  # it owes Redis keys (purged after the objects are deleted)
    drain_when_nothing_executed: ClassVar[bool] = False  # drain (earlier runs' debts) even with no part executed
    extra_counters: ClassVar[tuple[str, ...]] = ()  # counters of its results emitted as metrics
    labels: ClassVar[dict[str, str]] = {}  # task id -> Jinja label of a mapped task (`shard`, `part`)

    @property
    def first(self) -> str:
        """The step that fixes the run's plan: the kind's first."""
        if self.tasks.prepare:
            return PREPARE
        return SHARDS if self.tasks.shards else PLAN

    def preflight(self) -> tuple[Callable[[], object], ...]:
        """Settings to read before the run is even recorded (a bad one is a ConfigurationError): nothing is written
        for a run that no setting lets start. A DAG's first task reads them first; so does `run_through`."""
        return ()

    def check(self, work: Work) -> None:
        """Refuse a setting or a bucket no run could work with (a ConfigurationError), before the plan is fixed."""

    def prepare(self, work: Work, *, plans: bool) -> TaskResult:
        """Work before planning, run whether or not the run plans itself (`plans`); its result is reported."""
        raise NotImplementedError(f"{type(self).__name__} has no prepare step")

    def shards(self, work: Work, prepared: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The run's shards, each planned by `plan` (called only when the run makes its own plan)."""
        return [{}]

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        """Plan one shard (into the plan store); return what was planned, for the report."""
        raise NotImplementedError

    def nothing_planned(self) -> TaskResult:
        """The plan step's result when the run plans nothing itself (it executes a dry run's plan)."""
        return next(iter(self.reported.planned.values()))()

    def execute(self, work: Work, part: dict[str, Any] | None) -> TaskResult:
        """Execute one part of the plan (`{"collection", "part"}`), or the whole plan (`part` None, `mapped`
        False). Called only by the engine, once the gate let the plan through."""
        raise NotImplementedError(f"{type(self).__name__} plans objects alone: the engine owes them to the drain")

    def summaries(self) -> dict[str, Callable[[psycopg.Connection, RunRef], dict[str, Any]]]:
        """Figures the report reads back from the kind's own tables: name -> function of the connection and run."""
        return {}
