"""Live sandboxes through the API on the real local backend (bubblewrap, the in-sandbox
agent): execs that build on each other's files, delete and idle reclaim leave no process,
and the queue's max_concurrency queues or refuses (docs/sandboxes.md)."""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

from scheduling.backends.base import WarmSpec
from scheduling.engine import sandboxes as door
from scheduling.engine.registry import get_backend
from scheduling.models import Queue, Sandbox, Task
from scheduling.selectors import site_view_invalidate
from tests.integration.conftest import wait_for
from tests.unit.scheduling.sandboxes.helpers import create, run
from tests.unit.scheduling.sessions.helpers import in_namespace, pid_namespace

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def api(site, researcher) -> APIClient:
    client = APIClient()
    client.force_authenticate(researcher)
    return client


def _namespace(sid: str) -> str:
    task = Task.objects.get(sandbox__public_id=sid)
    return pid_namespace(get_backend(task.backend), task.backend_id)


def _queue(**values) -> None:
    Queue.objects.filter(name="inference-agent").update(**values)
    site_view_invalidate()


def test_create_twenty_execs_that_build_on_each_other_then_delete_leaves_nothing(api):
    made = create(api)
    assert made.status_code == 201, made.content
    sid = made.json()["id"]
    assert made.json()["state"] == "ready"
    namespace = _namespace(sid)
    steps = [
        ["sh", "-c", "echo 1 > count"],
        *[["sh", "-c", "echo $(( $(tail -n1 count) + 1 )) >> count"] for _ in range(16)],
        ["sh", "-c", "sleep 300 &"],  # a background process: it must not outlive the sandbox
        ["wc", "-l", "count"],
        ["tail", "-n1", "count"],
    ]
    answers = [run(api, sid, argv) for argv in steps]
    assert [a.status_code for a in answers] == [200] * 20
    assert all(a.json()["exit_code"] == 0 for a in answers), [a.json() for a in answers]
    assert answers[-2].json()["stdout"] == "17 count\n"
    assert answers[-1].json()["stdout"] == "17\n"
    assert api.get(f"/api/v1/sandboxes/{sid}/files/count").content.endswith(b"16\n17\n")
    assert len(in_namespace(namespace)) >= 2  # the agent and the background sleep
    ended = api.delete(f"/api/v1/sandboxes/{sid}/")
    assert ended.json()["state"] == "ended", ended.content
    wait_for(lambda: not in_namespace(namespace), timeout=10, what="the sandbox's processes")
    assert Sandbox.objects.get(public_id=sid).exec_count == 20


def test_idle_reclaim_at_the_timeout_leaves_no_process(api):
    sid = create(api, idle_timeout_s=2).json()["id"]
    namespace = _namespace(sid)
    assert run(api, sid, ["true"]).json()["exit_code"] == 0
    assert door.reclaim() == 0
    time.sleep(2.5)
    assert door.reclaim() == 1
    sandbox = Sandbox.objects.get(public_id=sid)
    assert (sandbox.state, sandbox.end_reason) == ("ended", "idle")
    wait_for(lambda: not in_namespace(namespace), timeout=10, what="the sandbox's processes")
    assert run(api, sid, ["true"]).status_code == 409


def test_the_cap_refuses_or_queues_as_the_queue_says(api):
    _queue(max_concurrency=1, over_concurrency="refuse")
    first = create(api).json()["id"]
    refused = create(api)
    assert refused.status_code == 409, refused.content
    assert "maximum of 1 jobs" in refused.json()["errors"][0]["message"]
    _queue(over_concurrency="queue")
    waiting = create(api)
    assert waiting.status_code == 202 and waiting.json()["state"] == "queued", waiting.content
    second = waiting.json()["id"]
    api.delete(f"/api/v1/sandboxes/{first}/")

    def ready() -> bool:
        return api.get(f"/api/v1/sandboxes/{second}/").json()["state"] == "ready"

    wait_for(ready, timeout=20, what="the queued sandbox to start", step=0.2)
    assert run(api, second, ["echo", "ok"]).json()["stdout"] == "ok\n"
    api.delete(f"/api/v1/sandboxes/{second}/")


def test_a_create_takes_a_warm_sandbox_and_is_billed_from_the_claim(api):
    assert door.warm_pass()  # the default site keeps {"": 2} warm in inference-agent
    backend = get_backend("local")

    def warm_ready() -> bool:
        return sum(v.ready for v in backend.keep_warm([WarmSpec("", 1, 1024, 2)])) >= 1

    wait_for(warm_ready, timeout=20, what="a warm sandbox", step=0.1)
    sid = create(api).json()["id"]
    task = Task.objects.get(sandbox__public_id=sid)
    state = backend.store.read_state(task.backend_id)
    assert state.get("warm"), state  # it took a warm sandbox over
    assert run(api, sid, ["echo", "warm"]).json()["stdout"] == "warm\n"
    sandbox = Sandbox.objects.get(public_id=sid)
    assert abs((sandbox.ready_at - sandbox.created_at).total_seconds()) < 1
    api.delete(f"/api/v1/sandboxes/{sid}/")
    backend.keep_warm([])
