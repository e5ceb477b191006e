"""The policy's pure functions: admission, levels, order, fair share, estimated start.

No database, no clock: time is a parameter, moved by the tests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.decisions import levels as L
from scheduling.decisions.estimate import Ahead, Busy, estimate_start
from scheduling.decisions.order import (
    Run,
    ScheduleError,
    decayed_usage,
    on_room,
    order_key,
    parse_weight_schedule,
    priority_value,
    share_factors,
    weight_at,
)
from scheduling.decisions.quota import Admit, Ask, Hold, QuotaRule, Reject, Usage, admit
from scheduling.decisions.types import NodeAllocation
from scheduling.sites import default_site
from scheduling.spec import TASK_TYPES, Resources, TaskSpec

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
SITE = default_site()
GPU32 = QuotaRule("materials", "training", "gpus", 32, id=1)


def ask(gpus=8, cpus=64, user="alice", project="materials", queue="training") -> Ask:
    return Ask(project=project, queue=queue, user=user, gpus=gpus, cpus=cpus)


# -- admission ----------------------------------------------------------------------------


def test_within_the_quota_is_admitted():
    assert admit(ask(gpus=8), [GPU32], {GPU32.scope: Usage(gpus=24)}) == Admit()


def test_over_the_quota_waits_and_the_reason_names_it_with_numbers():
    decision = admit(ask(gpus=8), [GPU32], {GPU32.scope: Usage(gpus=32)})
    assert isinstance(decision, Hold)
    assert decision.reason == (
        "project materials uses 32/32 GPUs in queue training; it waits for room"
    )
    assert decision.quota == 1


def test_a_reject_quota_refuses_what_is_over_it():
    rule = QuotaRule("materials", "training", "gpus", 32, over_quota="reject")
    decision = admit(ask(gpus=16), [rule], {rule.scope: Usage(gpus=24)})
    assert isinstance(decision, Reject) and not decision.never
    assert decision.reason.startswith("project materials uses 24/32 GPUs in queue training")
    assert decision.field == "resources.gpus"


def test_asking_more_than_the_limit_is_refused_whatever_the_action():
    decision = admit(ask(gpus=40), [GPU32], {})
    assert isinstance(decision, Reject) and decision.never
    assert decision.reason == (
        "asks 40 GPUs, but project materials may hold at most 32 GPUs in queue training"
    )


def test_user_quotas_count_the_users_own_use_and_project_quotas_everyones():
    mine = QuotaRule("materials", "training", "tasks", 2, user="alice")
    usage = {
        GPU32.scope: Usage(gpus=8, tasks=3),
        mine.scope: Usage(gpus=0, tasks=2),
        ("materials", "training", "bob"): Usage(tasks=1),
    }
    assert isinstance(admit(ask(gpus=8, user="alice"), [GPU32, mine], usage), Hold)
    assert admit(ask(gpus=8, user="bob"), [GPU32, mine], usage) == Admit()


def test_rules_of_other_projects_or_queues_do_not_apply():
    other = QuotaRule("genomics", "training", "gpus", 0)
    hpc = QuotaRule("materials", "hpc", "cpus", 1)
    assert admit(ask(gpus=8), [other, hpc], {}) == Admit()


# -- levels --------------------------------------------------------------------------------


def rules() -> tuple[L.LevelRule, ...]:
    return SITE.level_rules


def level_at(task_type: str, waited_s: float, **kw) -> L.Level:
    rule = L.rule_for(rules(), task_type, "q")
    task = L.Waiting(task_type=task_type, queue="q", ready_at=T0, **kw)
    return L.level(task, rule, T0 + timedelta(seconds=waited_s))


def test_agent_tasks_enter_high_and_drop_to_medium_after_30_seconds_unstarted():
    assert level_at("agent", 29.9).level == L.HIGH
    dropped = level_at("agent", 30)
    assert dropped.level == L.MEDIUM
    assert dropped.reason == "agent tasks enter high; dropped to medium after 30s waiting"
    assert level_at("agent", 86400).level == L.MEDIUM  # once, not further


def test_training_rises_one_level_per_ten_minutes_up_to_high():
    assert level_at("ai-training", 599).level == L.MEDIUM
    assert level_at("ai-training", 600).level == L.HIGH
    assert level_at("ai-training", 7200).level == L.HIGH


def test_hpc_enters_low_and_stays_there():
    assert level_at("hpc-simulation", 10 * 86400).level == L.LOW


def test_an_approved_raise_holds_until_it_expires():
    until = T0 + timedelta(hours=1)
    raised = level_at("hpc-simulation", 60, floor=L.HIGH, floor_until=until, floor_reason="r#1")
    assert (raised.level, raised.reason) == (L.HIGH, "r#1")
    expired = level_at("hpc-simulation", 3601, floor=L.HIGH, floor_until=until)
    assert expired.level == L.LOW


def test_a_task_that_asked_for_low_stays_low():
    capped = level_at("agent", 0, cap=L.LOW)
    assert capped.level == L.LOW and "asked for priority low" in capped.reason


def test_a_queues_own_rule_wins_over_the_general_one():
    own = L.LevelRule("agent", queue="special", start=L.LOW)
    assert L.rule_for((*rules(), own), "agent", "special") is own
    assert L.rule_for((*rules(), own), "agent", "other").start == L.HIGH
    assert L.rule_for((), "agent", "q") is L.DEFAULT_RULE


def test_the_next_change_of_a_rising_rule_is_known():
    rule = L.rule_for(rules(), "ai-training", "q")
    task = L.Waiting("ai-training", "q", ready_at=T0)
    assert L.next_change(task, rule, T0 + timedelta(seconds=100)) == 500
    assert L.next_change(task, rule, T0 + timedelta(seconds=700)) is None  # at the top


def test_rules_describe_themselves_in_the_seeds_words():
    texts = [r.describe() for r in rules()]
    assert "agent tasks enter high and drop to medium after 30s unstarted" in texts
    assert "ai-training tasks enter medium and rise one level per 10min waiting, up to high" in (
        texts
    )


# -- order: weights, fair share, numbers -----------------------------------------------


def test_weight_windows_follow_the_time_of_day_and_wrap_past_midnight():
    windows = parse_weight_schedule(SITE.weight_schedules["inference-agent"], TASK_TYPES)
    assert weight_at(windows, "agent", 9 * 60) == 2.0
    assert weight_at(windows, "agent", 21 * 60) == 1.0
    assert weight_at(windows, "ai-inference", 23 * 60) == 2.0
    assert weight_at(windows, "ai-inference", 3 * 60) == 2.0  # 20:00–08:00 wraps
    assert weight_at(windows, "ai-inference", 12 * 60) == 1.0


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"from": "08:00"}, "weight_schedule"),
        ([{"from": "8am", "to": "20:00", "weights": {"agent": 2}}], "weight_schedule[0].from"),
        ([{"from": "08:00", "to": "08:00", "weights": {"agent": 2}}], "weight_schedule[0].to"),
        (
            [{"from": "08:00", "to": "20:00", "weights": {"robots": 2}}],
            "weight_schedule[0].weights",
        ),
        (
            [{"from": "08:00", "to": "20:00", "weights": {"agent": 0}}],
            "weight_schedule[0].weights.agent",
        ),
    ],
)
def test_a_bad_weight_schedule_is_refused_naming_the_field(schedule, field):
    with pytest.raises(ScheduleError) as caught:
        parse_weight_schedule(schedule, TASK_TYPES)
    assert caught.value.field == field


def test_decayed_usage_halves_per_half_life():
    day = 86400.0
    recent = decayed_usage([Run(10, 0, day)], now=day, half_life_s=7 * day)
    old = decayed_usage([Run(10, 0, day)], now=8 * day, half_life_s=7 * day)
    assert old == pytest.approx(recent / 2, rel=1e-9)
    assert recent == pytest.approx(10 * day, rel=0.06)  # barely decayed over its own day


def test_fair_share_favours_the_project_that_used_less_of_its_share():
    factors = share_factors({"heavy": 900.0, "light": 100.0}, {"heavy": 1, "light": 1})
    assert factors["light"] > factors["heavy"]
    assert share_factors({}, {"a": 1, "b": 1}) == {"a": 1.0, "b": 1.0}
    # A bigger share forgives more use.
    factors = share_factors({"a": 500.0, "b": 500.0}, {"a": 3, "b": 1})
    assert factors["a"] > factors["b"]


def test_the_order_is_level_then_weight_then_share_then_first_come():
    def key(level, weight=1.0, share=1.0, ready=0.0, task_id=1):
        return order_key(level=level, weight=weight, share=share, ready_at=ready, task_id=task_id)

    assert key(L.HIGH, weight=0.5) < key(L.MEDIUM, weight=9)
    assert key(L.MEDIUM, weight=2) < key(L.MEDIUM, weight=1, share=1)
    assert key(L.MEDIUM, share=0.9) < key(L.MEDIUM, share=0.1)
    assert key(L.MEDIUM, ready=1) < key(L.MEDIUM, ready=2)


def test_priority_numbers_keep_the_order_and_fit_slurm():
    high = priority_value(level=L.HIGH, weight=0.1, share=0.0)
    medium = priority_value(level=L.MEDIUM, weight=10, share=1.0)
    assert high > medium > priority_value(level=L.MEDIUM, weight=2, share=1.0)
    assert priority_value(level=L.MEDIUM, weight=1, share=0.9) > priority_value(
        level=L.MEDIUM, weight=1, share=0.2
    )
    assert priority_value(level=L.HIGH, weight=10, share=1) < 2**32 - 1


def test_borrowed_room_goes_after_its_levels_own_quota_work_and_before_the_level_below():
    def key(level, borrowed, weight=1.0, ready=0.0):
        return order_key(
            level=level, weight=weight, share=1.0, ready_at=ready, task_id=1, borrowed=borrowed
        )

    assert key(L.MEDIUM, False, weight=0.5, ready=9) < key(L.MEDIUM, True, weight=9)
    assert key(L.MEDIUM, True) < key(L.LOW, False)
    own = priority_value(level=L.MEDIUM, weight=0.5, share=0.1)
    lent = priority_value(level=L.MEDIUM, weight=10, share=1.0, borrowed=True)
    assert own > lent > priority_value(level=L.LOW, weight=10, share=1.0)
    assert priority_value(level=L.HIGH, weight=10, share=1, borrowed=False) < 2**32 - 1
    # What an admission does to the number the task was given at submission, and undoes.
    assert on_room(own, borrowed=True) == priority_value(
        level=L.MEDIUM, weight=0.5, share=0.1, borrowed=True
    )
    assert on_room(on_room(own, borrowed=True), borrowed=False) == own
    assert on_room(own, borrowed=False) == own


# -- estimated start ------------------------------------------------------------------------


def test_a_task_is_estimated_to_start_when_running_work_reaches_its_walltime():
    queue = SITE.queues_by_name()["hpc"]
    nodes = SITE.nodes_by_pool()["cpu-hpc"]
    busy = [
        Busy(NodeAllocation(node=n.name, cpus=64, memory_mib=1024), ends_at=1000.0 + 600 * i)
        for i, n in enumerate(nodes)
    ]
    spec = TaskSpec("t", "p", Resources(cpus=64), walltime_s=3600)
    assert estimate_start(spec, queue, nodes, busy, [], now=0.0) == 1000.0
    # One like it ahead takes the first node that frees; this one gets the second.
    assert estimate_start(spec, queue, nodes, busy, [Ahead(spec, queue)], now=0.0) == 1600.0


def test_no_estimate_without_walltimes():
    queue = SITE.queues_by_name()["hpc"]
    nodes = SITE.nodes_by_pool()["cpu-hpc"]
    busy = [Busy(NodeAllocation(node=n.name, cpus=64, memory_mib=1024), None) for n in nodes]
    spec = TaskSpec("t", "p", Resources(cpus=8), walltime_s=60)
    assert estimate_start(spec, queue, nodes, busy, [], now=0.0) is None
    assert estimate_start(spec, queue, nodes, [], [], now=5.0) == 5.0  # free now
