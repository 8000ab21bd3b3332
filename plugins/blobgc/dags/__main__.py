"""`python -m blobgc.dags install DAGS_FOLDER DAG_ID ...`: enable blobgc DAGs in a DAG folder (one short file each).

`python -m blobgc.dags list` shows the DAGs the package ships; `--collections` names the four a team
with only its own collections needs (mark, sweep, reconcile, restore). An existing file that differs is
left alone unless `--force`; blobgc's own file of an earlier version (only its docstring differs) is updated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blobgc.dags import COLLECTION_DAGS, DAGS, dag_file


def code_of(text: str) -> str | None:
    """What follows a DAG file's opening docstring (None when it opens with none)."""
    end = text.find('"""\n', 3) if text.startswith('"""') else -1
    return text[end + 4 :] if end >= 0 else None


def earlier_blobgc_file(text: str, dag_id: str) -> bool:
    """Whether `text` is blobgc's file for `dag_id` as an earlier version wrote it: the same code, another docstring
    (1.5.0's blobgc_mark cited a document since renamed)."""
    return code_of(text) == code_of(dag_file(dag_id))


def install(folder: Path, dag_ids: list[str], *, force: bool = False) -> list[str]:
    """Write `folder/<dag_id>.py` for each DAG; return what it did, a line per DAG."""
    unknown = [d for d in dag_ids if d not in DAGS]
    if unknown:
        raise SystemExit(f"unknown DAG(s): {', '.join(unknown)}; blobgc ships: {', '.join(DAGS)}")
    folder.mkdir(parents=True, exist_ok=True)
    done = []
    for dag_id in dag_ids:
        path, text = folder / f"{dag_id}.py", dag_file(dag_id)
        existing = path.read_text() if path.exists() else None
        if existing == text:
            done.append(f"unchanged  {path}")
        elif existing is not None and not force and not earlier_blobgc_file(existing, dag_id):
            raise SystemExit(f"{path} exists and is not blobgc's file for {dag_id}: move it away, or pass --force")
        else:
            path.write_text(text)
            done.append(f"{'updated' if existing is not None else 'wrote':10} {path}")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m blobgc.dags", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the DAGs blobgc ships")
    add = sub.add_parser("install", help="write one short file per DAG into a DAG folder")
    add.add_argument("folder", type=Path, help="the deployment's DAG folder, e.g. $AIRFLOW_HOME/dags")
    add.add_argument("dag_ids", nargs="*", metavar="DAG_ID")
    add.add_argument("--collections", action="store_true", help=f"also {', '.join(COLLECTION_DAGS)}")
    add.add_argument("--all", action="store_true", help="every DAG blobgc ships")
    add.add_argument("--force", action="store_true", help="overwrite files that differ")
    args = parser.parse_args(argv)
    if args.command == "list":
        for dag_id, what in DAGS.items():
            print(f"{dag_id:22} {what}")
        return 0
    chosen = (
        list(DAGS) if args.all else list(dict.fromkeys([*(COLLECTION_DAGS if args.collections else ()), *args.dag_ids]))
    )
    if not chosen:
        parser.error("name the DAGs to enable (see `python -m blobgc.dags list`), or --collections, or --all")
    for line in install(args.folder, chosen, force=args.force):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
