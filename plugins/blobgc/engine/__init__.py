"""The engine of planned deletion: one protocol every kind of collector implements (`Deletion`), and the steps
that run it the same way for every caller (`blobgc.engine.run`): fix the plan, plan, judge it at the gate,
execute only what the gate let through, owe and drain, report.

A kind lives in its own folder (`blobgc.kinds.<kind>`, or the collections' `blobgc.collectors`) and implements
`Deletion`; `blobgc.dag_kit.builder.destructive_dag` makes its DAG from it, and `blobgc.engine.run.run_through`
runs it in one process (tests, benches). The engine knows no kind, and no Airflow.
"""

from blobgc.engine.deletion import Deletion, LocalWork, Reported, Tasks, Work

__all__ = ["Deletion", "LocalWork", "Reported", "Tasks", "Work"]
