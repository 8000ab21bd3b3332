"""DagBag integrity: every DAG imports, is tagged, retries, alerts on failure, and has the tasks and Params the
contract names."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"

EXPECTED_TASKS = {
    "blobgc_mark": {"check_references", "remove_stale_page_usages", "mark_blobs", "publish_marks"},
    "blobgc_sweep": {"plan_shards", "plan_deletions", "gate", "plan_parts", "retry_owed_objects", "delete_unused_blobs",
                     "delete_owed_objects", "purge_quarantine", "report"},
    "blobgc_crawler": {"stage_requests", "crawl_batch", "report"},
    "blobgc_image_cleanup": {"plan_unbound_images", "gate", "delete_unbound_images", "delete_owed_objects",
                             "purge_quarantine", "report"},
    "blobgc_reconcile": {"plan_shards", "reconcile_shard", "gate", "owe_planned_objects", "delete_owed_objects",
                         "purge_quarantine", "report"},
    "blobgc_paste_expiry": {"check_ref_counts", "expiry_ranges", "plan_expiry", "gate", "plan_parts", "expire_pastes",
                            "delete_owed_objects", "purge_quarantine", "purge_cache_keys",
                            "report"},
    "blobgc_generations": {"open_generation", "plan_collection", "collect", "gate", "plan_parts", "delete_planned_blobs",
                           "delete_owed_objects", "purge_quarantine", "report"},
    "blobgc_media_staging": {"plan_shards", "plan_stale_staging", "gate", "owe_planned_objects", "delete_owed_objects",
                             "purge_quarantine", "report"},
    "blobgc_restore": {"plan_restore", "cancel_owed_deletions", "restore_objects", "restore_rows",
                       "collections_with_rows", "restore_collection_rows", "report"},
    "blobgc_media_thumbnails": {"drain_thumbnail_queue", "plan_shards", "check_thumbnails", "gate",
                                "owe_planned_objects", "delete_owed_objects", "purge_quarantine", "report"},
}
# docs/reference.md §4: the paste expiry has no grace Param of its own (a paste's expires_at is its grace), nor
# does the generations DAG (its grace is the n-2 rule); its own Param is false_positive_rate
# (the sweep's grace_hours is null: each collection's own grace_hours, which a given Param can only lengthen)
GRACE_PARAMS = {"blobgc_mark": ("page_grace_days", 30), "blobgc_sweep": ("grace_hours", None),
                "blobgc_paste_expiry": (None, None), "blobgc_image_cleanup": ("grace_days", 14),
                "blobgc_reconcile": ("min_age_hours", 24), "blobgc_generations": ("false_positive_rate", 0.01),
                "blobgc_media_staging": ("max_age_minutes", 60), "blobgc_media_thumbnails": ("min_age_hours", 24)}


@pytest.fixture(scope="module")
def dagbag():
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}


def test_every_dag_file_defines_the_dag_named_after_it(dagbag):
    for path in DAGS.glob("*.py"):
        assert path.stem in dagbag.dags, f"{path.name} does not define DAG {path.stem}"


def test_expected_dags_and_task_ids(dagbag):
    for dag_id, tasks in EXPECTED_TASKS.items():
        assert set(dagbag.dags[dag_id].task_ids) == tasks


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_TASKS))
def test_dag_is_tagged_retries_and_runs_one_at_a_time(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert "blobgc" in dag.tags
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert dag.is_paused_upon_creation is True  # whatever the deployment's dags_are_paused_at_creation
    assert dag.doc_md and dag_id in dag.doc_md
    for task in dag.tasks:
        assert task.retries >= 2, f"{dag_id}.{task.task_id} retries {task.retries}"
        assert task.execution_timeout is not None
        assert task.retry_exponential_backoff


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_TASKS))
def test_every_task_alerts_on_failure_through_blobgc_notify(dagbag, dag_id):
    """Every task's on_failure_callback is blobgc's notifier, which reads Variable blobgc_notify when it fails."""
    from blobgc.dag_kit.notify import BlobgcFailureNotifier

    for task in dagbag.dags[dag_id].tasks:
        callbacks = task.on_failure_callback
        callbacks = callbacks if isinstance(callbacks, list) else [callbacks]  # a mapped task keeps it unwrapped
        assert any(isinstance(c, BlobgcFailureNotifier) for c in callbacks), \
            f"{dag_id}.{task.task_id} on_failure_callback {callbacks}"


@pytest.mark.parametrize("dag_id", sorted(GRACE_PARAMS))
def test_destructive_dag_params(dagbag, dag_id):
    params = dagbag.dags[dag_id].params
    assert params["dry_run"] is False
    assert params["batch_size"] == 1000
    grace, default = GRACE_PARAMS[dag_id]
    if grace is not None:
        assert params[grace] == default


@pytest.mark.parametrize("dag_id", ["blobgc_mark", "blobgc_sweep", "blobgc_reconcile", "blobgc_restore"])
def test_the_collecting_dags_take_the_collections_param_defaulting_to_all(dagbag, dag_id):
    assert dagbag.dags[dag_id].params["collections"] is None  # docs/reference.md §6: a list of names; default all


def test_batch_size_over_1000_is_rejected(dagbag):
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    params = ParamsDict(dagbag.dags["blobgc_sweep"].params)
    with pytest.raises(ParamValidationError,
                       match="^Invalid input for param batch_size: 1001 is greater than the maximum of 1000"):
        params["batch_size"] = 1001
        params.validate()


def test_sweep_is_scheduled_on_the_mark_asset(dagbag):
    mark_outlets = {a.name for t in dagbag.dags["blobgc_mark"].tasks for a in t.outlets}
    assert "blobgc_marked_blobs" in mark_outlets
    assert "blobgc_marked_blobs" in str(dagbag.dags["blobgc_sweep"].timetable.asset_condition)


def test_s3_tasks_use_the_s3_pool(dagbag):
    sweep = dagbag.dags["blobgc_sweep"]
    for task_id in ("retry_owed_objects", "delete_owed_objects"):
        assert sweep.get_task(task_id).pool == "blobgc_s3"
    assert dagbag.dags["blobgc_paste_expiry"].get_task("delete_owed_objects").pool == "blobgc_s3"
    assert dagbag.dags["blobgc_image_cleanup"].get_task("delete_owed_objects").pool == "blobgc_s3"
    assert dagbag.dags["blobgc_crawler"].get_task("crawl_batch").pool == "blobgc_http"
    assert dagbag.dags["blobgc_reconcile"].get_task("delete_owed_objects").pool == "blobgc_s3"


def test_reconcile_params(dagbag):
    assert dagbag.dags["blobgc_reconcile"].params["prefixes"] is None


def test_crawler_params(dagbag):
    params = dagbag.dags["blobgc_crawler"].params
    assert params["cache_days"] == 14 and params["requests"] is None


def test_paste_expiry_steps_are_separate_tasks_in_order(dagbag):
    """Database batch, S3 deletions and Redis purge are separate tasks, joined through PostgreSQL."""
    dag = dagbag.dags["blobgc_paste_expiry"]
    assert dag.get_task("check_ref_counts").downstream_task_ids >= {"expiry_ranges"}
    assert dag.get_task("expiry_ranges").downstream_task_ids >= {"plan_expiry"}
    assert dag.get_task("plan_expiry").downstream_task_ids >= {"gate"}
    assert dag.get_task("gate").downstream_task_ids >= {"plan_parts"}
    assert dag.get_task("plan_parts").downstream_task_ids >= {"expire_pastes"}
    assert dag.get_task("expire_pastes").downstream_task_ids >= {"delete_owed_objects", "purge_cache_keys"}
    assert "purge_cache_keys" not in dag.get_task("delete_owed_objects").downstream_task_ids


def test_dag_files_do_no_work_at_import():
    """No DB, S3 or Variable access at the top level of a DAG file (STYLE: wiring only)."""
    for path in DAGS.glob("*.py"):
        top_level = [line for line in path.read_text().splitlines() if line and not line[0].isspace()]
        for line in top_level:
            assert "Variable.get" not in line and "connect(" not in line and "client(" not in line, line


def test_plugins_airflowignore_lists_the_library():
    assert "blobgc/" in (ROOT / "plugins" / ".airflowignore").read_text().split()


# Issue 20: in every destructive DAG the tasks that plan come before `gate`, and the tasks that delete rows or
# owe objects for the first time come after it, so no new deletion can start before the gate has judged the plan.
# (`delete_owed_objects`/`retry_owed_objects` may run earlier: they drain what earlier, judged runs owe.)
PLANNING_AND_EXECUTING = {
    "blobgc_sweep": ({"plan_deletions"}, {"plan_parts", "delete_unused_blobs"}),
    "blobgc_image_cleanup": ({"plan_unbound_images"}, {"delete_unbound_images"}),
    "blobgc_reconcile": ({"reconcile_shard"}, {"owe_planned_objects"}),
    "blobgc_paste_expiry": ({"check_ref_counts", "plan_expiry"}, {"plan_parts", "expire_pastes"}),
    "blobgc_generations": ({"collect"}, {"plan_parts", "delete_planned_blobs"}),
    "blobgc_media_staging": ({"plan_stale_staging"}, {"owe_planned_objects"}),
    "blobgc_media_thumbnails": ({"check_thumbnails"}, {"owe_planned_objects"}),
}


@pytest.mark.parametrize("dag_id", sorted(PLANNING_AND_EXECUTING))
def test_every_destructive_dag_plans_before_its_gate_and_deletes_only_after_it(dagbag, dag_id):
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    dag = dagbag.dags[dag_id]
    planning, executing = PLANNING_AND_EXECUTING[dag_id]
    gate = dag.get_task("gate")
    assert isinstance(gate, ApprovalOperator)
    before_gate = gate.get_flat_relative_ids(upstream=True)
    assert planning <= before_gate, f"{dag_id}: {planning - before_gate} not upstream of the gate"
    after_gate = gate.get_flat_relative_ids(upstream=False)
    assert executing <= after_gate, f"{dag_id}: {executing - after_gate} not downstream of the gate"
    assert "report" in after_gate  # the report records the gate's decision, even a rejection


def test_every_destructive_dag_is_built_by_the_one_builder_and_none_checks_the_gate_itself(dagbag):
    """Issue 31: the seven destructive DAGs (tagged "destructive") are wired by `destructive_dag`, whose builder
    marks what it built; no DAG file and no module of a kind's folder calls a gate check of its own: the code that
    executes a plan checks it."""
    import re

    from blobgc.dag_kit.builder import BUILT_BY

    destructive = {dag_id for dag_id, dag in dagbag.dags.items() if "destructive" in dag.tags}
    assert destructive == set(PLANNING_AND_EXECUTING)
    for dag_id in destructive:
        assert getattr(dagbag.dags[dag_id], BUILT_BY, None) == "destructive_dag", dag_id
    package = ROOT / "plugins" / "blobgc"
    sources = [*(package / "dags").glob("*.py"), *(package / "kinds").rglob("*.py"), *DAGS.glob("*.py")]
    assert any(p.name == "dag.py" and p.parent.parent.name == "kinds" for p in sources)
    for path in sources:
        assert not re.search(r"check_may_execute|require_go|check_plan_goes_on|let_through", path.read_text()), path
