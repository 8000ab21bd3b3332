"""The engine of planned deletion (`blobgc.engine`): it fixes the plan in the kind's first step, refuses to execute a
part the gate did not let through before the kind is even called, and runs a kind end to end outside Airflow.

`Recorder` is a kind made for these tests: it plans one item per shard into the real plan store and records each
call the engine makes of it. `PasteExpiry` is seed 002's real kind, run through the engine against the stack.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from blobgc.core.cache_purge import purge_owed_cache_keys
from blobgc.core.gate import GateSettings, judge, let_through, record_judgement
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.plans import GateClosed, add_plan_item, plan_of, plan_parts
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, ensure_run
from blobgc.core.settings import ConfigurationError
from blobgc.engine import Deletion, LocalWork, Reported, Tasks, Work
from blobgc.engine import run as engine
from blobgc.kinds.pastes.deletion import PasteExpiry
from demo_app.pastes import create_paste
from tests.helpers import NOW, cached_keys, object_keys
from tests.support.pastes import PAST


@dataclass
class Planned(TaskResult):
    items: int = 0


@dataclass
class Executed(TaskResult):
    parts: int = 0


@dataclass
class Recorder(Deletion):
    """A kind that plans one object key per shard (never deleted: its `execute` only records the part)."""

    shard_names: tuple[str, ...] = ("a", "b")
    calls: list[tuple[str, Any]] = field(default_factory=list)
    bad_setting: bool = False

    tasks = Tasks(shards="shards", plan="plan", execute="execute")
    reported = Reported(planned={"planned": Planned}, executed=("executed", Executed))

    def preflight(self):
        def read() -> object:
            self.calls.append(("preflight", None))
            if self.bad_setting:
                raise ConfigurationError("Variable blobgc_test: not a setting")
            return None

        return (read,)

    def check(self, work: Work) -> None:
        self.calls.append(("check", None))

    def shards(self, work: Work, prepared: dict[str, Any] | None) -> list[dict[str, Any]]:
        self.calls.append(("shards", None))
        return [{"name": n} for n in self.shard_names]

    def plan(self, work: Work, shard: dict[str, Any], prepared: dict[str, Any] | None) -> TaskResult:
        self.calls.append(("plan", shard["name"]))
        with work.conn.transaction():
            add_plan_item(work.conn, work.run, part=f"shard {shard['name']}", collection=None, source="test",
                          bucket="engine-test", keys=[f"engine/{shard['name']}"], sizes=[1], modified_before=NOW)
        return Planned(items=1)

    def execute(self, work: Work, part: dict[str, Any] | None) -> TaskResult:
        self.calls.append(("execute", part["part"] if part else None))
        return Executed(parts=1)


def work(conn, name: str, *, dry_run: bool = False, **params) -> LocalWork:
    run = ensure_run(conn, RunRef("engine_test", name, dry_run), NOW)
    return LocalWork(conn, run, {"plan_max_age_hours": 24, **params})


def test_the_first_step_fixes_the_run_s_own_plan_and_the_others_only_read_it(conn):
    kind, w = Recorder(), work(conn, "own")
    shards = engine.shards(w, kind)
    assert plan_of(conn, w.run) == "own"
    assert [engine.plan(w, kind, s).to_xcom() for s in shards] == [{"items": 1}, {"items": 1}]
    assert kind.calls == [("check", None), ("shards", None), ("plan", "a"), ("plan", "b")]  # checked once, first


def test_a_run_executing_a_dry_run_s_plan_plans_nothing_itself(conn):
    dry_kind, dry = Recorder(), work(conn, "dry", dry_run=True)
    ran = engine.run_through(dry, dry_kind, approved_by="tests")
    assert ran.planned == [{"items": 1}, {"items": 1}] and ran.executed == []  # a dry run executes nothing
    conn.execute("UPDATE blobgc.run SET finished_at = now() WHERE run_id = 'dry'")

    kind, w = Recorder(), work(conn, "real", from_plan="dry")
    assert engine.shards(w, kind) == []  # nothing of its own to plan
    assert plan_of(conn, w.run) == "dry"
    ran = engine.run_through(w, kind, approved_by="tests")
    assert sorted(p for c, p in kind.calls if c == "execute") == ["shard a", "shard b"]  # the dry run's plan
    assert ("plan", "a") not in kind.calls


def test_execute_refuses_a_part_the_gate_did_not_let_through_before_the_kind_is_called(conn):
    kind, w = Recorder(), work(conn, "refused")
    for shard in engine.shards(w, kind):
        engine.plan(w, kind, shard)
    part = {"collection": None, "part": "shard a"}
    with pytest.raises(GateClosed, match="not judged yet"):
        engine.execute(w, kind, part)
    with pytest.raises(GateClosed):
        engine.parts(w)
    record_judgement(conn, w.run, judge(conn, w.run, GateSettings()), "rejected", "a person")
    with pytest.raises(GateClosed, match="rejected"):
        engine.execute(w, kind, part)
    assert not [c for c in kind.calls if c[0] == "execute"]  # the kind was never asked


def test_run_through_judges_the_plan_then_executes_every_part(conn):
    kind, w = Recorder(), work(conn, "through")
    ran = engine.run_through(w, kind, approved_by="tests")
    assert ran.decision == "passed"
    assert ran.executed == [{"parts": 1}, {"parts": 1}]
    assert [c for c, _ in kind.calls] == ["preflight", "check", "shards", "plan", "plan", "execute", "execute"]


def test_a_bad_setting_fails_before_the_run_is_recorded(conn):
    kind = Recorder(bad_setting=True)
    run = RunRef("engine_test", "unset")
    with pytest.raises(ConfigurationError, match="blobgc_test"):
        engine.run_through(LocalWork(conn, run, {}), kind, approved_by="tests")
    assert conn.execute("SELECT count(*) FROM blobgc.run WHERE dag_id = 'engine_test'").fetchone()[0] == 0
    assert kind.calls == [("preflight", None)]


def test_paste_expiry_runs_through_the_engine_outside_airflow(conn, s3, redis, bucket, redis_prefix):
    due = [create_paste(conn, s3, redis, bucket=bucket, content=f"engine {i}".encode(), expires_at=PAST,
                        redis_prefix=redis_prefix) for i in range(3)]
    kind = PasteExpiry(bucket=lambda: bucket, redis_prefix=lambda: redis_prefix)
    run = ensure_run(conn, RunRef("blobgc_paste_expiry", "engine"), NOW)
    w = LocalWork(conn, run, {"batch_size": 1000, "expiry_workers": 2, "plan_max_age_hours": 24}, s3, redis)

    prepared = engine.prepare(w, kind).to_xcom()  # planned, not judged yet: a part of it is refused
    planned = [engine.plan(w, kind, shard, prepared) for shard in engine.shards(w, kind, prepared)]
    assert sum(p.pastes for p in planned) == 3
    with pytest.raises(GateClosed, match="not judged yet"):
        engine.execute(w, kind, {"collection": None, "part": plan_parts(conn, run)[0]["part"]})
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == 3

    # the whole run, as the DAG runs it (a retry of the planning steps plans the same pastes again)

    ran = engine.run_through(w, kind, approved_by="tests")
    assert ran.prepared is not None and ran.decision == "passed"
    assert sum(p["pastes"] for p in ran.planned) == 3
    assert sum(e["pastes_deleted"] for e in ran.executed) == 3
    assert delete_owed_objects(conn, s3, run).objects_deleted == 3
    assert object_keys(s3, bucket) == set()
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == 0
    assert len(cached_keys(redis, redis_prefix)) == len(due)  # owed to the purge, which unlinks them
    assert purge_owed_cache_keys(conn, redis, run).keys_found == len(due)
    assert cached_keys(redis, redis_prefix) == set()
    assert let_through(conn, run, approved_by="tests") == "passed"  # judged once, kept
