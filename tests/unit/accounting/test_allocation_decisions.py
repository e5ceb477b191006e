"""The pure part of allocations: which one covers a day, and the reasons new work waits."""

from __future__ import annotations

from datetime import date

from accounting.allocations import (
    AllocationView,
    Line,
    current,
    lines,
    needs,
    outside_reason,
    spent_reason,
)

Y2026 = AllocationView("materials 2026", date(2026, 1, 1), date(2026, 12, 31), 500, 10_000)
Y2027 = AllocationView("materials 2027", date(2027, 1, 1), date(2027, 12, 31), 800, None)


def test_the_allocation_covering_the_day_is_current():
    assert current([Y2026, Y2027], date(2026, 12, 31)) == Y2026
    assert current([Y2026, Y2027], date(2027, 1, 1)) == Y2027
    assert current([Y2026], date(2027, 1, 1)) is None


def test_after_its_last_day_new_work_waits_for_a_renewal():
    assert outside_reason([Y2026], date(2027, 1, 2)) == (
        "allocation 'materials 2026' expired on 2026-12-31 — a lead may request a renewal"
    )


def test_before_its_first_day_new_work_waits_until_then():
    assert outside_reason([Y2027], date(2026, 6, 1)) == (
        "allocation 'materials 2027' starts on 2027-01-01 — new work waits until then"
    )


def test_a_project_without_allocations_or_with_a_current_one_does_not_wait():
    assert outside_reason([], date(2026, 6, 1)) is None
    assert outside_reason([Y2026, Y2027], date(2026, 6, 1)) is None


def test_a_spent_gpu_budget_holds_gpu_work_only():
    used = {"gpu_hours": 500.0, "core_hours": 20.0}
    assert needs(2, 1) == ("gpu_hours", "core_hours")
    assert spent_reason(Y2026, used, needs(2, 1)) == (
        "allocation 'materials 2026' has used 500.0 of its 500 GPU-hours — a lead may request more"
    )
    assert spent_reason(Y2026, used, needs(0, 4)) is None


def test_a_resource_the_allocation_does_not_limit_never_holds():
    assert spent_reason(Y2027, {"core_hours": 1e9}, needs(0, 4)) is None


def test_lines_show_granted_used_and_remaining_of_limited_resources():
    assert lines(Y2026, {"gpu_hours": 612.5, "core_hours": 100.25}) == [
        Line("gpu_hours", "GPU-hours", 500, 612.5, 0.0),
        Line("core_hours", "core-hours", 10_000, 100.25, 9899.75),
    ]
    assert [line.resource for line in lines(Y2027, {})] == ["gpu_hours"]
