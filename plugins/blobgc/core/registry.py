"""The kinds of collector blobgc runs, as `blobgc.kinds` installs them: what the shared machinery asks of a kind.

The core knows no application. Each kind of collector has its folder (`blobgc/kinds/<kind>/`) and describes
itself there in one `Kind`:

- the key layouts it owns: the outbox's guards are looked up by deletion-log source (`blobgc.core.keys`);
- the bucket-wide keys reconcile lists and checks against its table (`KeySource`), and the privileges that
  check (and the drain's guard) needs on the table;
- the collections it keeps in their own columns (`ColumnMode`: seed 000's app_blob);
- why restore cannot put back the rows of its sources, where it cannot;
- per DAG: what it collects, the tables and sequences it uses with the privileges on each (checked by the
  DAG's first task), and where its plans take their sizes from.

`blobgc.kinds` installs every kind at once (`install`), before anything asks; asking before that raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from blobgc.core import collections, keys

ALL_DML = ("SELECT", "INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True)
class DagNeeds:
    """One DAG of a kind: what it collects and uses (`tables` maps a table to the privileges the DAG uses on it),
    and, for a DAG the package ships, the module that defines it (a DAG of the application's, such as the
    crawler, which calls the application's code, names none)."""

    what: str  # "seed 002's pastes": named in the error when a table is missing
    tables: Mapping[str, tuple[str, ...]]
    sequences: tuple[str, ...] = ()
    plan_sizes: str | None = None  # where the DAG's plans take their keys' sizes from, in words
    module: str | None = None  # the kind's module that defines the DAG, when the package ships it (`dag`)
    summary: str = ""  # what it does, in a line (`python -m blobgc.dags list`)


@dataclass(frozen=True)
class Kind:
    """One kind of collector, as its folder declares it."""

    name: str
    layouts: tuple[keys.KeyLayout, ...] = ()
    reconciled: tuple[keys.KeySource, ...] = ()  # in listing order
    reconciled_tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # table -> privileges
    dags: Mapping[str, DagNeeds] = field(default_factory=dict)
    column_modes: tuple[collections.ColumnMode, ...] = ()  # collections it keeps in their own columns
    not_restorable: Mapping[str, str] = field(default_factory=dict)  # source -> why restore cannot put rows back


@dataclass
class Registry:
    kinds: tuple[Kind, ...] = ()

    def installed(self) -> tuple[Kind, ...]:
        collections.INSTALLATION.check()
        return self.kinds


REGISTRY = Registry()


def install(kinds: Iterable[Kind]) -> None:
    """Install every kind at once (`blobgc.kinds` does): their layouts become the outbox's and reconcile's."""
    every = tuple(kinds)
    names = [k.name for k in every]
    if len(set(names)) != len(names):
        raise ValueError(f"a kind is installed twice: {names}")
    dag_ids = [dag_id for k in every for dag_id in k.dags]
    if len(set(dag_ids)) != len(dag_ids):
        raise ValueError(f"two kinds declare the same DAG: {dag_ids}")
    modes = [mode.collection.name for k in every for mode in k.column_modes]
    if len(set(modes)) != len(modes):
        raise ValueError(f"two kinds declare the same collection in column mode: {modes}")
    keys.install_layouts(
        (layout for k in every for layout in k.layouts), (source for k in every for source in k.reconciled)
    )
    collections.install_column_modes(mode for k in every for mode in k.column_modes)
    REGISTRY.kinds = every
    collections.INSTALLATION.done = True


def dag_needs(dag_id: str) -> DagNeeds | None:
    """What `dag_id` collects and uses, if a kind declares it (the collection DAGs name no fixed table)."""
    for kind in REGISTRY.installed():
        if dag_id in kind.dags:
            return kind.dags[dag_id]
    return None


def not_restorable(source: str) -> str | None:
    """Why a restore cannot put back the rows of a kind's deletion-log source, in its kind's words."""
    return next((k.not_restorable[source] for k in REGISTRY.installed() if source in k.not_restorable), None)


def reconciled_tables() -> dict[str, tuple[str, ...]]:
    """Every table reconcile checks keys against, with the privileges it needs there, in listing order."""
    return {table: privileges for k in REGISTRY.installed() for table, privileges in k.reconciled_tables.items()}


def kind_tables() -> tuple[str, ...]:
    """Every table a kind's layout or DAG names (reconcile's and the kinds' DAGs'), each once."""
    tables = [source.name for k in REGISTRY.installed() for source in k.reconciled]
    tables += [t for k in REGISTRY.installed() for needs in k.dags.values() for t in needs.tables]
    return tuple(dict.fromkeys(tables))


def kind_of_source(source: str) -> str | None:
    """The name of the kind whose key layout a deletion-log source is (Variable blobgc_quarantine names kinds)."""
    for kind in REGISTRY.kinds:
        if any(layout.source == source for layout in kind.layouts):
            return kind.name
        if any(mode.source == source for mode in kind.column_modes):
            return kind.name
    return None
