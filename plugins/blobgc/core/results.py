"""What a task hands to the next one through XCom: one typed result per task type, counts and names only.

XCom carries ids and counts, never key lists: a field marked `local()` (sample keys, say) stays in
the task's log. `to_xcom` and `from_xcom` are explicit, so a report task reads the same type back
that the task wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field, fields
from typing import Any, TypeVar

R = TypeVar("R", bound="TaskResult")


def local(default_factory: Callable[[], Any] = list) -> Any:
    """A result field kept out of XCom (it stays in the task's log)."""
    return field(default_factory=default_factory, repr=False, metadata={"xcom": False})


class TaskResult:
    """Base of the collectors' dataclass results: explicit, JSON-safe conversion to and from XCom."""

    def to_xcom(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("xcom", True)}  # type: ignore[arg-type]

    @classmethod
    def from_xcom(cls: type[R], data: dict[str, Any] | None) -> R:
        names = {f.name for f in fields(cls) if f.metadata.get("xcom", True)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in (data or {}).items() if k in names})

    @classmethod
    def total(cls: type[R], parts: list[dict[str, Any]] | None) -> dict[str, Any]:
        """The sum of the numeric fields of several mapped tasks' results (their XCom), for a report."""
        totals: dict[str, Any] = {}
        for part in parts or []:
            for name, value in cls.from_xcom(part).to_xcom().items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    totals[name] = totals.get(name, 0) + value
        return totals
