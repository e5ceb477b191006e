"""submit_concurrently: several submissions at once, each answer in its request's place."""

from __future__ import annotations

import threading
import time

import pytest

from scheduling.backends.base import (
    BackendError,
    BackendUnavailable,
    Job,
    JobState,
    SubmitRequest,
    submit_concurrently,
)
from scheduling.decisions.types import QueuePolicy
from scheduling.spec import TaskSpec

QUEUE = QueuePolicy(name="q", pool="p", task_types=())


def _requests(n: int) -> list[SubmitRequest]:
    spec = TaskSpec(name="t", project="p", command=("true",))
    return [
        SubmitRequest(key=f"k{i}", spec=spec, type="agent", queue=QUEUE, project="p", user="u")
        for i in range(n)
    ]


def test_answers_keep_their_requests_order_while_several_run_at_once():
    running, most = [0], [0]
    lock = threading.Lock()

    def submit(request: SubmitRequest) -> Job:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02 if request.key == "k0" else 0.005)  # the first answers last
        with lock:
            running[0] -= 1
        if request.key == "k3":
            raise BackendError("refused: bad partition")
        return Job(backend_id=f"id-{request.key}", state=JobState.PENDING)

    results = submit_concurrently(submit, _requests(8), workers=4)
    assert 1 < most[0] <= 4
    assert [getattr(r, "backend_id", None) for r in results] == [
        "id-k0",
        "id-k1",
        "id-k2",
        None,
        "id-k4",
        "id-k5",
        "id-k6",
        "id-k7",
    ]
    assert isinstance(results[3], BackendError) and "bad partition" in str(results[3])


def test_once_the_backend_is_unreachable_the_rest_are_not_tried():
    tried = []

    def submit(request: SubmitRequest) -> Job:
        tried.append(request.key)
        raise BackendUnavailable("the controller does not answer")

    results = submit_concurrently(submit, _requests(20), workers=1)
    assert tried == ["k0"]
    assert all(isinstance(r, BackendUnavailable) for r in results)


def test_a_bug_in_a_submission_is_not_swallowed():
    def submit(request: SubmitRequest) -> Job:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        submit_concurrently(submit, _requests(3), workers=2)
