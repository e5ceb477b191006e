"""Quotas that lend: a project over its nominal quota borrows the cohort's unused quota.

Hand-checked cases: every number below is worked out in the comment beside it.
"""

from __future__ import annotations

from scheduling.decisions import NodeAllocation, NodeView, QueuePolicy
from scheduling.decisions.levels import HIGH, LOW, MEDIUM
from scheduling.decisions.preempt import Running, whom_to_preempt
from scheduling.decisions.quota import (
    ADMIT,
    Admit,
    Ask,
    Hold,
    QuotaRule,
    Reject,
    Usage,
    admit,
    free_to_borrow,
)
from scheduling.spec import Resources, TaskSpec


def rule(project: str, limit: int = 32, borrow: int = 0, lend: int | None = None, **kw):
    return QuotaRule(
        project, "training", "gpus", limit, borrowing_limit=borrow, lending_limit=lend, **kw
    )


def ask(project: str = "materials", gpus: int = 32) -> Ask:
    return Ask(project=project, queue="training", user="alice", gpus=gpus, cpus=gpus * 4)


def use(**gpus: int) -> dict:
    return {(p, "training", None): Usage(gpus=g) for p, g in gpus.items()}


MATERIALS = rule("materials", borrow=32, lend=16)
COHORT = (rule("climate", borrow=32, lend=16), rule("astro", borrow=32, lend=16))


def test_within_its_nominal_quota_a_project_is_admitted_and_borrows_nothing():
    decision = admit(ask(gpus=32), [MATERIALS], use(materials=0), cohort=COHORT)
    assert decision == ADMIT
    assert decision.borrowed == 0 and decision.text == ""


def test_over_its_nominal_quota_it_borrows_what_lenders_do_not_use():
    # materials holds 32/32 and asks 32 more: climate and astro each lend min(16, 32 - 0).
    decision = admit(ask(gpus=32), [MATERIALS], use(materials=32), cohort=COHORT)
    assert decision == Admit(32, "gpus")
    assert decision.text == "runs on 32 borrowed GPUs"


def test_it_borrows_only_the_part_over_its_nominal_quota():
    # 24/32 used, asks 16: 8 within its own quota, 8 borrowed.
    decision = admit(ask(gpus=16), [MATERIALS], use(materials=24), cohort=COHORT)
    assert decision == Admit(8, "gpus")


def test_a_lender_lends_at_most_its_unused_nominal_quota():
    # climate uses 24/32 (lends min(16, 8) = 8), astro 32/32 (lends 0): 8 to lend, 32 asked.
    decision = admit(
        ask(gpus=32), [MATERIALS], use(materials=32, climate=24, astro=32), cohort=COHORT
    )
    assert isinstance(decision, Hold)
    assert decision.reason == (
        "project materials uses 32/32 GPUs in queue training; the cohort has 8 GPUs to lend, "
        "it asks 32; it waits for room"
    )


def test_what_others_already_borrow_is_not_lent_twice():
    # Lenders: climate min(16, 32) + astro min(16, 32) = 32; geo borrows 24 already: 8 left.
    cohort = (*COHORT, rule("geo", borrow=32, lend=16))
    usage = use(materials=32, geo=56)
    assert free_to_borrow(MATERIALS, cohort, usage) == 8
    assert isinstance(admit(ask(gpus=8), [MATERIALS], usage, cohort=cohort), Admit)
    assert isinstance(admit(ask(gpus=16), [MATERIALS], usage, cohort=cohort), Hold)


def test_its_own_borrowing_counts_against_what_is_left():
    # materials (may borrow 64) already borrows 16 (48/32) of the cohort's 32: 16 left.
    materials = rule("materials", borrow=64)
    decision = admit(ask(gpus=32), [materials], use(materials=48), cohort=COHORT)
    assert isinstance(decision, Hold)
    assert "the cohort has 16 GPUs to lend, it asks 32" in decision.reason
    assert admit(ask(gpus=16), [materials], use(materials=48), cohort=COHORT) == Admit(16, "gpus")
    # With a borrowing limit of 32, 48 + 32 - 32 = 48 borrowed in all would be over it.
    decision = admit(ask(gpus=32), [MATERIALS], use(materials=48), cohort=COHORT)
    assert isinstance(decision, Hold)
    assert "it borrows 16 of at most 32 GPUs, it asks 32" in decision.reason


def test_it_never_borrows_past_its_borrowing_limit():
    cohort = (rule("climate", lend=None), rule("astro", lend=None))  # 64 to lend
    materials = rule("materials", borrow=16)
    decision = admit(ask(gpus=8), [materials], use(materials=44), cohort=cohort)
    # 44 + 8 - 32 = 20 borrowed in all, over its limit of 16.
    assert isinstance(decision, Hold)
    assert "it borrows 12 of at most 16 GPUs, it asks 8" in decision.reason


def test_asking_more_than_nominal_and_borrowing_together_allow_is_refused_outright():
    decision = admit(ask(gpus=72), [MATERIALS], use(), cohort=COHORT)
    assert isinstance(decision, Reject) and decision.never
    assert decision.reason == (
        "asks 72 GPUs, but project materials may hold at most 64 GPUs in queue training "
        "with what it may borrow"
    )
    # With no cohort to lend, the nominal quota is the ceiling, as without lending.
    assert isinstance(admit(ask(gpus=40), [MATERIALS], use()), Reject)
    # A cohort lending 8 in all caps what may ever be borrowed at 8: 41 is refused, 40 not.
    small = (rule("climate", lend=8),)
    assert isinstance(admit(ask(gpus=41), [MATERIALS], use(), cohort=small), Reject)
    assert admit(ask(gpus=40), [MATERIALS], use(), cohort=small) == Admit(8, "gpus")


def test_without_a_borrowing_limit_the_quota_holds_as_before():
    plain = rule("materials")
    decision = admit(ask(gpus=32), [plain], use(materials=32), cohort=COHORT)
    assert decision == Hold(
        "project materials uses 32/32 GPUs in queue training; it waits for room"
    )


def test_user_quotas_and_budgets_neither_lend_nor_borrow():
    member = QuotaRule("materials", "training", "gpus", 8, user="alice", borrowing_limit=32)
    assert not member.lends
    decision = admit(
        ask(gpus=8), [member], {("materials", "training", "alice"): Usage(gpus=8)}, cohort=COHORT
    )
    assert isinstance(decision, Hold)
    # A member's quota of another project is no lender either.
    assert (
        free_to_borrow(MATERIALS, (QuotaRule("climate", "training", "gpus", 32, user="bob"),), {})
        == 0
    )


def test_a_lender_within_its_nominal_quota_is_admitted_whatever_others_borrow():
    # materials borrows all 32 the cohort lends; climate, within its own 32, is admitted.
    usage = use(materials=64, climate=0, astro=0)
    assert admit(ask("climate", 32), [COHORT[0]], usage, cohort=(MATERIALS, COHORT[1])) == ADMIT


# -- borrowed work and preemption ----------------------------------------------------------

INFERENCE = QueuePolicy(
    name="inference-agent", pool="inf", task_types=("ai-inference",), preemptible=True
)
NODE = NodeView(name="inf001", cpus=32, memory_mib=256 * 1024, gpus=4)


def running(key: str, gpu: int, *, level: int = LOW, borrowed: str = "", queue_preempts=True):
    alloc = NodeAllocation(node="inf001", cpus=1, memory_mib=1024, gpu_indices=(gpu,))
    return Running(key, "ai-inference", level, queue_preempts, (alloc,), 0.0, borrowed=borrowed)


def one_gpu() -> TaskSpec:
    return TaskSpec(name="t", project="p", resources=Resources(cpus=1, gpus=1, memory_mib=1024))


def test_a_lender_reclaims_borrowed_work_whatever_its_level_and_before_lower_levels():
    full = [
        running("low", 0, level=LOW),
        running("borrowed-high", 1, level=HIGH, borrowed="inference-agent"),
        running("mine-2", 2, level=HIGH),
        running("mine-3", 3, level=HIGH),
    ]
    decision = whom_to_preempt(
        one_gpu(), INFERENCE, MEDIUM, [NODE], full, reclaim="inference-agent"
    )
    assert decision is not None and decision.victims == ("borrowed-high",)
    assert "on borrowed quota" in decision.reason
    # Not within its nominal quota: only the lower level yields.
    decision = whom_to_preempt(one_gpu(), INFERENCE, MEDIUM, [NODE], full)
    assert decision is not None and decision.victims == ("low",)


def test_borrowed_work_in_a_queue_that_does_not_preempt_is_never_reclaimed():
    full = [
        running(f"b{i}", i, level=LOW, borrowed="inference-agent", queue_preempts=False)
        for i in range(4)
    ]
    assert (
        whom_to_preempt(one_gpu(), INFERENCE, HIGH, [NODE], full, reclaim="inference-agent") is None
    )
    training = [
        Running(f"t{i}", "ai-training", LOW, True, r.allocations, borrowed="inference-agent")
        for i, r in enumerate(running(f"x{i}", i) for i in range(4))
    ]
    assert (
        whom_to_preempt(one_gpu(), INFERENCE, HIGH, [NODE], training, reclaim="inference-agent")
        is None
    )


def test_only_work_borrowed_in_the_lenders_queue_yields_to_it():
    full = [running(f"b{i}", i, level=HIGH, borrowed="other-queue") for i in range(4)]
    assert (
        whom_to_preempt(one_gpu(), INFERENCE, MEDIUM, [NODE], full, reclaim="inference-agent")
        is None
    )
