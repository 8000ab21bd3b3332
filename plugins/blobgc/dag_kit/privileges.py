"""The first task's privilege check: what the DAG's run will touch, from its collections file and Params.

`check_dag_privileges` is what every DAG's first task calls (`blobgc.dag_kit.steps.open_step`) before it reads
or writes anything: a missing privilege fails the task at once, without retries, naming each one and its
GRANT (`blobgc.core.privileges`). A dry run is checked for the real run's privileges.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from blobgc.core.collections import CollectionsError, load_collections, select
from blobgc.core.privileges import COLLECTION_TABLE, check_privileges, dag_needs
from blobgc.dag_kit.variables import blob_bucket, extra_blob_references

log = logging.getLogger(__name__)

DRY_RUN_NOTE = " (a dry run is checked for what the real run needs, so that it proves the real run can run)"


def check_dag_privileges(conn: psycopg.Connection, dag_id: str, params: dict[str, Any]) -> None:
    """Raise MissingPrivileges (no retries), naming each privilege the run of `dag_id` with `params` lacks and the
    GRANT that gives it; the collection DAGs' needs come from the collections file and Param `collections`."""
    collections = []
    extra: dict[str, list[str]] = {}
    selected = params.get("collections")
    if dag_id in COLLECTION_TABLE:
        try:
            collections = select(load_collections(default_bucket=blob_bucket()), selected)
        except CollectionsError:
            if dag_id != "blobgc_restore" or selected:
                raise
            # restoring a seed DAG's run needs no collections file: a restore that needs one fails where it reads it
            log.warning("the collections file does not load: its tables' privileges are not checked")
        for c in collections:
            if c.reserved_by_a_kind:  # as `references` reads them
                extra[c.name] = extra_blob_references()
    needs = dag_needs(
        conn,
        dag_id,
        collections=collections,
        extra_references=extra,
        check_references=bool(selected),
        seeds=not selected,
    )
    check_privileges(conn, dag_id, needs, note=DRY_RUN_NOTE if params.get("dry_run") else "")
