"""Who may see which runs: Airflow's auth manager decides, per DAG, whether a user may read that DAG's runs.

A receipt or manifest lists every key a run deleted (keys embed user ids and column values) and who approved it,
so the reclaim app shows a run only to a user the auth manager lets read runs of its DAG: the check Airflow's own
`GET /api/v2/dags/{dag_id}/dagRuns/{run_id}` makes (GET on DagAccessEntity.RUN, with the DAG's team when
`[core] multi_team` is on).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def readable_dag_ids(user: Any, dag_ids: Iterable[str]) -> set[str]:
    """The DAGs among `dag_ids` whose runs Airflow's auth manager lets `user` read."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.configuration import conf

    wanted = set(dag_ids)
    teams: dict[str, str | None] = {}
    if wanted and conf.getboolean("core", "multi_team", fallback=False):
        from airflow.models.dag import DagModel

        teams = DagModel.get_dag_id_to_team_name_mapping(sorted(wanted))
    manager = get_auth_manager()
    return {
        dag_id
        for dag_id in wanted
        if manager.is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id, team_name=teams.get(dag_id)),
            user=user,
        )
    }


def may_read_runs(user: Any, dag_id: str) -> bool:
    """Whether Airflow's auth manager lets `user` read the runs of `dag_id` (its receipts and manifests)."""
    return dag_id in readable_dag_ids(user, [dag_id])
