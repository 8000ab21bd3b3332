"""The documents cite tests by pytest node id (`tests/<folder>/<file>.py::<test>`): each must name a test that
pytest collects, read from the test files with `ast` (no pytest run inside the run)."""
from __future__ import annotations

import ast
import os
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITING = ("docs/operations.md", "README.md")
NODE_ID = re.compile(r"tests/[\w/]+\.py(?:::\w+)+(?:\[[^\]\s`]*\])?")
# a citation in backticks that is not a whole node id: `::test_x` shorthand, or a path outside tests/
PARTIAL = re.compile(r"`(?!tests/)[\w/]*(?:\.py)?::test_\w+`")
GUARANTEES = "## Safety guarantees"


@cache
def collected(path: Path) -> frozenset[str]:
    """The node ids below `path` that pytest collects by its defaults: module-level `test*` functions and the
    `test*` methods of `Test*` classes without an `__init__` (parametrized ids are the function's id)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    ids = {node.name for node in tree.body if isinstance(node, functions) and node.name.startswith("test")}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test") and not any(
                isinstance(m, functions) and m.name == "__init__" for m in node.body):
            ids |= {f"{node.name}::{m.name}" for m in node.body if isinstance(m, functions) and m.name.startswith("test")}
    return frozenset(ids)


def cited(document: str) -> list[str]:
    return NODE_ID.findall((ROOT / document).read_text(encoding="utf-8"))


def unresolved(node_id: str) -> str | None:
    """Why `node_id` names no collected test, or None when it does."""
    path, _, name = node_id.partition("::")
    name = re.sub(r"\[.*\]$", "", name)
    file = ROOT / path
    if not file.is_file():
        return f"{path} does not exist"
    if not re.fullmatch(r"test_\w+\.py|\w+_test\.py", file.name):
        return f"{path} is not a file pytest collects (test_*.py)"
    if name not in collected(file):
        return f"{path} has no test {name}"
    return None


@pytest.mark.parametrize("document", CITING)
def test_every_test_a_document_cites_exists(document):
    ids = cited(document)
    problems = {node_id: why for node_id in ids if (why := unresolved(node_id))}
    assert problems == {}, f"{document} cites tests that do not exist: {problems}"


def test_the_operations_guide_cites_each_guarantees_proof_by_its_whole_node_id():
    text = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    section = text.split(GUARANTEES, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| guarantee ")]
    assert len(rows) >= 10, "the table of guarantees is gone or was split differently"
    assert PARTIAL.findall(section) == []  # no `::name` shorthand nor paths outside tests/: each id is whole
    assert [row for row in rows if not NODE_ID.search(row.rsplit("|", 2)[-2])] == []  # each guarantee has a proof


def test_an_id_of_no_test_is_reported(tmp_path):
    """The checker itself: a renamed test, a moved file and a class method are each judged right."""
    assert unresolved("tests/test_docs.py::test_every_test_a_document_cites_exists[README.md]") is None
    assert unresolved("tests/test_docs.py::test_that_was_renamed") == "tests/test_docs.py has no test test_that_was_renamed"
    assert unresolved("tests/integration/test_sweep.py::test_x") == "tests/integration/test_sweep.py does not exist"
    assert unresolved("tests/helpers.py::run_dag") == "tests/helpers.py is not a file pytest collects (test_*.py)"
    module = tmp_path / "test_shapes.py"
    module.write_text("class TestShapes:\n    def test_round(self):\n        pass\n\n"
                      "class TestBuilt:\n    def __init__(self):\n        pass\n\n    def test_never(self):\n        pass\n")
    assert collected(module) == {"TestShapes::test_round"}
    assert NODE_ID.findall("see `tests/a/test_b.py::test_c` and\n  tests/d/test_e.py::TestF::test_g[x-1].") == [
        "tests/a/test_b.py::test_c", "tests/d/test_e.py::TestF::test_g[x-1]"]
    assert PARTIAL.findall("`integration/test_sweep.py::test_a`, `::test_b`, `tests/x/test_y.py::test_z`") == [
        "`integration/test_sweep.py::test_a`", "`::test_b`"]


# ------------------------------------------------------------------ issue 30: the contract in the repository
REFERENCE = ROOT / "docs" / "reference.md"
RETIRED = "CONTRACT" + ".md"  # the document that was never in the repository (spelt so this file does not name it)
RETIRED_CITATION = re.compile("CONTRACT" + r"(?:\.md|'s| §)")  # "… §4" citations of it, and "the …'s command"
SKIPPED_DIRS = {".git", ".venv", ".blobgc", "__pycache__", ".pytest_cache", ".import_linter_cache", "build", "dist",
                "test-artifacts"}  # and *.egg-info, bench/results: what .gitignore keeps out
# The Variables blobgc reads, wherever the code names them: variable("blobgc_x", ...), Variable.get("blobgc_x"),
# and constants such as PRICES_VARIABLE = "blobgc_storage_prices".
VARIABLE_READS = re.compile(r'(?:\bvariable|Variable\.get)\(\s*"(blobgc_\w+)"|^\s*\w*VARIABLE\s*=\s*"(blobgc_\w+)"',
                            re.MULTILINE)


def repository_files() -> list[Path]:
    """Every file of the repository, outside .venv, .blobgc and what git ignores as build output and caches."""
    found = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if path.is_file() and not set(parts) & SKIPPED_DIRS and not any(p.endswith(".egg-info") for p in parts) \
                and parts[:2] != ("bench", "results"):
            found.append(path)
    return found


def test_no_file_in_the_repository_cites_the_retired_contract_document():
    """Issue 30: the README, `python -m blobgc.dags list`, the CHANGELOG and the code cited a contract document that
    is not in the repository; they cite docs/reference.md. Released migrations keep their old comments: a database
    records each one's checksum and refuses a migration edited after it was applied."""
    citing = {}
    for path in repository_files():
        if path.parent.name == "migrations" and re.fullmatch(r"\d{4}_\w+\.sql", path.name):
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        if RETIRED in text or RETIRED_CITATION.search(text):
            citing[str(path.relative_to(ROOT))] = RETIRED_CITATION.findall(text)[:3] or [RETIRED]
    assert citing == {}


def test_the_reference_names_every_dag_and_every_variable_the_code_reads():
    from blobgc.dags import DAGS

    text = REFERENCE.read_text(encoding="utf-8")
    dag_ids = [*DAGS, *(p.stem for p in (ROOT / "dags").glob("blobgc_*.py"))]
    assert [d for d in dag_ids if f"`{d}`" not in text] == []
    read = {a or b for path in (ROOT / "plugins" / "blobgc").rglob("*.py")
            for a, b in VARIABLE_READS.findall(path.read_text(encoding="utf-8"))}
    assert len(read) >= 10, f"the scan for Variables found only {sorted(read)}: did the code's idiom change?"
    assert sorted(v for v in read if f"`{v}`" not in text) == []
    for section in range(1, 8):  # the numbering the citations across the repository rely on
        assert f"\n## {section}. " in text


@pytest.fixture(scope="module")
def dags():
    from airflow.dag_processing.dagbag import DagBag

    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    assert len(bag.dags) >= 10
    return bag.dags


def test_the_reference_gives_every_dags_params_with_their_defaults(dags):
    """Each Param of each DAG appears in §4 as `name` (default), in its DAG's row or among the Params every
    deleting DAG takes, so that the reference says what the code does (sweep's `grace_hours` is null)."""
    import json

    section = REFERENCE.read_text(encoding="utf-8").split("\n## 4. ", 1)[1].split("\n## 5. ", 1)[0]
    common = section.split("\n| dag_id |", 1)[0]
    missing = []
    for dag_id, dag in dags.items():
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{dag_id}` |")]
        for name in dag.params.keys():
            param = dag.params.get_param(name)
            token = f"`{name}` (" + ("required" if not param.has_value and param.value is not None
                                      else json.dumps(param.value))
            if token not in row and token not in common:
                missing.append(f"{dag_id}: {token}")
    assert missing == []
