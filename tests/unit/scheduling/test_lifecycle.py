"""The pure lifecycle and dependency rules: no database, no clock; and the models' state
choices, which are the lifecycle's states."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduling.decisions import lifecycle as L
from scheduling.decisions.dependencies import cancelled_by_abort, dependency_verdict
from scheduling.models import ACTIVE_STATES, TERMINAL_STATES, AttemptState, TaskState


def outcome(**kw) -> L.Retry | L.End:
    args = dict(
        ended=L.FAILED,
        retriable=True,
        reason="exit code 3",
        attempt=1,
        retry_count=0,
        fail_action="abort",
        backoff_base_s=1.0,
        backoff_cap_s=60.0,
    )
    args.update(kw)
    return L.attempt_outcome(**args)


def test_terminal_states_have_no_way_out():
    for state in L.TERMINAL:
        for to in L.TRANSITIONS:
            assert not L.can_move(state, to)


def test_the_models_store_exactly_the_lifecycle_states():
    assert TaskState.values == list(L.TASK_STATES)
    assert set(L.TRANSITIONS) == set(L.TASK_STATES)
    assert AttemptState.values == list(L.ATTEMPT_STATES)
    assert (TERMINAL_STATES, ACTIVE_STATES) == (L.TERMINAL, L.ACTIVE)
    assert set(L.ATTEMPT_STATES) - {L.PREEMPTED} <= set(L.TASK_STATES)


def test_a_waiting_task_cannot_jump_to_running():
    assert not L.can_move(L.WAITING, L.RUNNING)
    assert L.can_move(L.WAITING, L.PENDING)


def test_a_failure_with_attempts_left_is_retried_with_a_doubling_backoff():
    first = outcome(attempt=1, retry_count=3)
    third = outcome(attempt=3, retry_count=3)
    assert isinstance(first, L.Retry) and isinstance(third, L.Retry)
    assert (first.backoff_s, third.backoff_s) == (1.0, 4.0)
    assert first.reason == "attempt 1 failed: exit code 3; retrying in 1s"
    assert first.message == "attempt 1 ended failed (exit code 3); 3 attempt(s) left"


def test_the_backoff_is_capped():
    assert L.retry_backoff_seconds(30, base_s=1, cap_s=60) == 60


def test_the_last_attempt_ends_the_task_in_its_own_state():
    assert outcome(attempt=2, retry_count=1) == L.End(L.FAILED, "exit code 3")
    assert outcome(ended=L.TIMEOUT, reason="walltime", retry_count=0) == L.End(
        L.TIMEOUT, "walltime"
    )


def test_a_cancel_is_never_retried():
    assert outcome(ended=L.CANCELLED, retriable=False, retry_count=5) == L.End(
        L.CANCELLED, "exit code 3"
    )


@pytest.mark.parametrize("ended", [L.FAILED, L.TIMEOUT])
def test_skip_turns_a_final_failure_into_skipped(ended):
    end = outcome(ended=ended, fail_action="skip")
    assert end == L.End(L.SKIPPED, f"{ended}: exit code 3; skipped (fail_action: skip)")


def test_skip_does_not_turn_a_cancel_into_skipped():
    assert outcome(ended=L.CANCELLED, retriable=False, fail_action="skip").state == L.CANCELLED


@dataclass
class Node:
    pk: int
    state: str
    fail_action: str = "abort"
    deps: tuple[Node, ...] = ()


def up(node: Node):
    return node.deps


def test_a_succeeded_or_skipped_dependency_lets_the_dependant_run():
    assert dependency_verdict(Node(1, L.SUCCEEDED), up) is True
    assert dependency_verdict(Node(1, L.SKIPPED), up) is True


def test_an_unfinished_dependency_leaves_it_undecided():
    for state in (L.PENDING, L.WAITING, L.QUEUED, L.RUNNING):
        assert dependency_verdict(Node(1, state), up) is None


def test_a_bad_end_with_abort_blocks_it():
    for state in (L.FAILED, L.TIMEOUT, L.CANCELLED):
        assert dependency_verdict(Node(1, state), up) is False


def test_a_cancelled_skip_task_lets_it_run_unless_an_abort_upstream_cancelled_it():
    user_cancelled = Node(2, L.CANCELLED, "skip", deps=(Node(1, L.SUCCEEDED),))
    assert dependency_verdict(user_cancelled, up) is True
    # a → (skip) b → (skip) c: a failed with abort, so b and c were never run.
    a = Node(1, L.FAILED, "abort")
    b = Node(2, L.CANCELLED, "skip", deps=(a,))
    c = Node(3, L.CANCELLED, "skip", deps=(b,))
    assert cancelled_by_abort(c, up)
    assert dependency_verdict(c, up) is False


def test_the_walk_up_a_long_chain_needs_no_recursion():
    node = Node(0, L.FAILED, "abort")
    for i in range(1, 5000):
        node = Node(i, L.CANCELLED, "skip", deps=(node,))
    assert dependency_verdict(node, up) is False
