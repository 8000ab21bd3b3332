"""blobgc.dag_kit.tables: a DAG enabled without its tables fails its first task, naming them."""
from __future__ import annotations

import pytest

from blobgc.dag_kit.tables import MissingTables, check_required_tables


def test_a_dag_whose_tables_exist_passes(conn):
    for dag_id in ("blobgc_paste_expiry", "blobgc_generations", "blobgc_image_cleanup", "blobgc_sweep"):
        check_required_tables(conn, dag_id)


def test_a_dag_whose_tables_are_missing_is_refused_naming_them(conn):
    with conn.transaction(force_rollback=True):
        conn.execute("ALTER TABLE gen.reference RENAME TO reference_elsewhere")
        with pytest.raises(MissingTables, match=r"blobgc_generations collects seed 003's generations of mail blobs "
                                                r"and needs the table\(s\) gen.reference, which this database"):
            check_required_tables(conn, "blobgc_generations")
