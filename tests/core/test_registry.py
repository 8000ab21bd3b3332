"""blobgc.core.registry and blobgc.kinds: every kind is installed at once, the core asks the kinds what it needs,
and nothing that needs a kind's guards runs before they are installed (a fresh interpreter, with no kinds)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from blobgc.core import keys, registry
from blobgc.core.collections import ColumnMode, column_modes
from blobgc.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]


def in_fresh_python(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter with plugins/ on the path, before anything imported blobgc.kinds."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "plugins")}, timeout=120)


def test_every_kind_folder_is_installed_and_every_source_has_its_guard():
    folders = sorted(p.name for p in (ROOT / "plugins" / "blobgc" / "kinds").iterdir()
                     if p.is_dir() and (p / "__init__.py").exists())
    assert sorted(k.name for k in KINDS) == folders
    assert [k.name for k in registry.REGISTRY.installed()] == [k.name for k in KINDS]
    for source in ("app.blob", "app.content", "app.image", "gen.blob", "media.thumbnails"):
        layout = keys.layout(source)
        assert layout is not None and layout.guard is not None, source
    assert [s.prefix for s in keys.reconciled_sources()] == ["blobs/", "pastes/", "images/", "mail/"]


def test_the_core_asks_the_kinds_for_their_dags_tables_and_restore_reasons():
    pastes = registry.dag_needs("blobgc_paste_expiry")
    assert pastes is not None and set(pastes.tables) == {"app.paste", "app.content"}
    assert pastes.module == "blobgc.kinds.pastes.dag"
    assert registry.dag_needs("blobgc_sweep") is None  # a collection DAG names no fixed table
    crawler = registry.dag_needs("blobgc_crawler")
    assert crawler is not None and crawler.sequences == ("app.image_id_seq",) and crawler.module is None
    assert "app.content" in registry.reconciled_tables()
    assert "not in the log" in (registry.not_restorable("app.content") or "")


def test_app_blob_is_a_collection_in_column_mode_declared_by_its_kind():
    mode = column_modes()["app_blob"]
    assert isinstance(mode, ColumnMode) and mode.collection.table == "app.blob" and mode.source == "app.blob"
    assert mode.collection.column_mode and mode.collection.source == "app.blob"
    assert {"mark/update_marks", "sweep/delete_rows", "restore/insert_rows"} <= set(mode.statements)


def test_installing_two_kinds_that_claim_one_source_is_refused():
    pastes = next(k for k in KINDS if k.name == "pastes")
    twin = registry.Kind("pastes_again", layouts=pastes.layouts)
    with pytest.raises(ValueError, match="app.content"):
        registry.install([*KINDS, twin])
    with pytest.raises(ValueError, match="installed twice"):
        registry.install([*KINDS, pastes])
    assert keys.layout("app.content") is pastes.layouts[0]  # the refused installs changed nothing


def test_before_the_kinds_are_installed_a_drain_cannot_find_a_guard_it_refuses():
    done = in_fresh_python("""
        from blobgc.core import keys
        from blobgc.core.collections import KindsNotInstalled, parse_collections
        for ask in (lambda: keys.layout("app.content"), lambda: keys.layout("collection:shop"),
                    lambda: keys.reconciled_sources(),
                    lambda: parse_collections("collections: {a: {table: s.t, id: id, keys: ['a/{id}']}}")):
            try:
                ask()
            except KindsNotInstalled:
                print("refused")
        import blobgc.kinds
        print(keys.layout("app.content").source)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused"] * 4 + ["app.content"]


def test_each_entry_point_installs_the_kinds_itself():
    for module in ("blobgc.plugin", "blobgc.dags", "blobgc.kinds.pastes.layouts", "blobgc.collectors.reconcile"):
        done = in_fresh_python(f"import {module}; from blobgc.core import keys; print(keys.layout('gen.blob').prefix)")
        assert (done.returncode, done.stdout.strip()) == (0, "mail/"), (module, done.stderr[-500:])
