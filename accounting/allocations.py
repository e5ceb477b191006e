"""Allocations, the pure part: which of a project's allocations covers a day, and why its
new work waits (docs/accounting.md, Allocations).

An allocation is a budget quota over dates instead of a repeating period: GPU-hours and
core-hours granted from a first to a last day, counted from the same usage records
(accounting/budget.py). A project with no allocation at all is limited by its quotas only;
once it has one, its new work waits outside the dates of every allocation, and while the
current one's budget for what the task uses is spent. No ORM here: the reader
(accounting/allocation_selectors.py) passes plain values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

RESOURCES = (("gpu_hours", "GPU-hours"), ("core_hours", "core-hours"))


@dataclass(frozen=True, slots=True)
class AllocationView:
    name: str
    starts: date
    ends: date
    gpu_hours: int | None = None  # None: not limited by this allocation
    core_hours: int | None = None

    def covers(self, day: date) -> bool:
        return self.starts <= day <= self.ends

    def granted(self, resource: str) -> int | None:
        return self.gpu_hours if resource == "gpu_hours" else self.core_hours


def current(allocations: Sequence[AllocationView], today: date) -> AllocationView | None:
    """The allocation that covers `today` (the latest to start, if several do)."""
    covering = [a for a in allocations if a.covers(today)]
    return max(covering, key=lambda a: (a.starts, a.ends)) if covering else None


def outside_reason(allocations: Sequence[AllocationView], today: date) -> str | None:
    """Why a project with allocations but none covering `today` waits; None when one covers
    it or the project has none."""
    if not allocations or current(allocations, today) is not None:
        return None
    ended = [a for a in allocations if a.ends < today]
    if ended:
        last = max(ended, key=lambda a: a.ends)
        return (
            f"allocation '{last.name}' expired on {last.ends:%Y-%m-%d} — a lead may request "
            "a renewal"
        )
    first = min(allocations, key=lambda a: a.starts)
    return (
        f"allocation '{first.name}' starts on {first.starts:%Y-%m-%d} — new work waits until then"
    )


def needs(gpus: int, cpus: int) -> tuple[str, ...]:
    """The budgets a task counts against: GPU-hours if it asks GPUs, core-hours if CPUs."""
    return tuple(r for r, n in (("gpu_hours", gpus), ("core_hours", cpus)) if n > 0)


def spent_reason(
    allocation: AllocationView, used: dict[str, float], wants: Sequence[str]
) -> str | None:
    """Why the task waits when the current allocation's budget of a resource it uses is
    spent (GPU-hours before core-hours); None when there is room."""
    for resource, unit in RESOURCES:
        granted = allocation.granted(resource)
        if resource not in wants or granted is None:
            continue
        spent = used.get(resource, 0.0)
        if spent >= granted:
            return (
                f"allocation '{allocation.name}' has used {spent:.1f} of its {granted} {unit} "
                "— a lead may request more"
            )
    return None


@dataclass(frozen=True, slots=True)
class Line:
    """One resource of an allocation, as the project page and the API show it."""

    resource: str
    unit: str
    granted: int
    used: float
    remaining: float


def lines(allocation: AllocationView, used: dict[str, float]) -> list[Line]:
    """Granted, used to date and remaining per resource the allocation limits."""
    found = []
    for resource, unit in RESOURCES:
        granted = allocation.granted(resource)
        if granted is None:
            continue
        spent = round(used.get(resource, 0.0), 3)
        found.append(Line(resource, unit, granted, spent, round(max(0.0, granted - spent), 3)))
    return found
