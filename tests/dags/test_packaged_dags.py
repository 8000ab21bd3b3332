"""blobgc.dags: the DAGs ship in the package, and a DAG folder enables each with a two-line file."""
from __future__ import annotations

import pytest

from blobgc.dags import COLLECTION_DAGS, DAGS, dag_file, load
from blobgc.dags.__main__ import main
from tests.helpers import ROOT


@pytest.mark.parametrize("dag_id", sorted(DAGS))
def test_the_checkouts_dag_file_is_the_one_the_install_command_writes(dag_id):
    assert (ROOT / "dags" / f"{dag_id}.py").read_text() == dag_file(dag_id)


def test_load_builds_a_fresh_dag_on_every_parse_with_the_settings_of_that_parse(monkeypatch):
    monkeypatch.setenv("BLOBGC_TASK_RETRIES", "1")
    first = load("blobgc_sweep")
    monkeypatch.setenv("BLOBGC_TASK_RETRIES", "5")
    second = load("blobgc_sweep")
    assert first is not second
    assert {t.retries for t in first.tasks} == {1}
    assert {t.retries for t in second.tasks} == {5}
    assert second.doc_md.lstrip().startswith("### blobgc_sweep")


def test_load_refuses_a_dag_blobgc_does_not_ship():
    with pytest.raises(ValueError, match="blobgc ships no DAG 'blobgc_crawler'"):
        load("blobgc_crawler")  # the crawler is the demo application's DAG (it runs the application's image code)


def test_install_writes_the_collection_dags_and_leaves_a_foreign_file_alone(tmp_path, capsys):
    assert main(["install", str(tmp_path), "--collections"]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.py")) == sorted(COLLECTION_DAGS)
    assert main(["install", str(tmp_path), "blobgc_sweep"]) == 0
    assert "unchanged" in capsys.readouterr().out
    (tmp_path / "blobgc_mark.py").write_text("# the team's own file\n")
    with pytest.raises(SystemExit, match="exists and is not blobgc's file for blobgc_mark"):
        main(["install", str(tmp_path), "blobgc_mark"])
    assert (tmp_path / "blobgc_mark.py").read_text() == "# the team's own file\n"
    assert main(["install", str(tmp_path), "blobgc_mark", "--force"]) == 0
    assert (tmp_path / "blobgc_mark.py").read_text() == dag_file("blobgc_mark")


def test_install_updates_blobgcs_own_file_of_an_earlier_version_whose_docstring_differs(tmp_path, capsys):
    """1.5.0's blobgc_mark file cited a document since renamed (docs/reference.md): upgrading and installing again
    rewrites it without --force, while a file with code of its own is still left alone."""
    earlier = dag_file("blobgc_mark").replace("(docs/reference.md §6)", "(the contract §6)")
    assert earlier != dag_file("blobgc_mark")
    (tmp_path / "blobgc_mark.py").write_text(earlier)
    assert main(["install", str(tmp_path), "blobgc_mark"]) == 0
    assert capsys.readouterr().out.startswith("updated")
    assert (tmp_path / "blobgc_mark.py").read_text() == dag_file("blobgc_mark")
    (tmp_path / "blobgc_mark.py").write_text(earlier + "dag.tags.append('ours')\n")
    with pytest.raises(SystemExit, match="exists and is not blobgc's file for blobgc_mark"):
        main(["install", str(tmp_path), "blobgc_mark"])


def test_install_refuses_an_unknown_dag_and_writes_nothing(tmp_path):
    with pytest.raises(SystemExit, match="unknown DAG"):
        main(["install", str(tmp_path), "blobgc_sweep", "blobgc_nope"])
    assert not list(tmp_path.iterdir())


def test_list_names_every_dag(capsys):
    assert main(["list"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(DAGS)
