"""The application tables each DAG collects, checked before a task does anything: every DAG is opt-in.

A team enables only the DAGs whose data it has (`python -m blobgc.dags list`). A DAG enabled against a
database without its tables imports fine, and its first task fails at once, without retries, naming
the missing tables. The collection DAGs (mark, sweep, reconcile, restore) need no fixed table: the
collections file names theirs, and it is checked against the catalog by the same first task.
"""

from __future__ import annotations

import psycopg

from blobgc.core import registry
from blobgc.core.catalog import missing_tables
from blobgc.core.settings import ConfigurationError


class MissingTables(ConfigurationError):
    """A DAG was enabled against a database that lacks the tables it collects."""


def check_required_tables(conn: psycopg.Connection, dag_id: str) -> None:
    """Raise MissingTables, naming them, when the database lacks a table `dag_id` collects."""
    needs = registry.dag_needs(dag_id)
    if needs is None:
        return
    what = needs.what
    missing = missing_tables(conn, list(needs.tables))
    if missing:
        raise MissingTables(
            f"{dag_id} collects {what} and needs the table(s) {', '.join(missing)}, which this database "
            f"(connection blobgc_postgres) does not have. Enable only the DAGs whose tables you have "
            f"(`python -m blobgc.dags list`): pause {dag_id} and remove dags/{dag_id}.py, or create the tables."
        )
