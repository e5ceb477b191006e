"""The local backend's warm pool of live sandboxes (docs/sandboxes.md): started ahead as the
service job account, handed to a session on claim (metered from then), replaced in the
background, scaled to zero on request; real bubblewrap, real processes."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import pytest

from scheduling.backends.base import JobState, SessionGone, WarmSpec
from scheduling.backends.local import LocalBackend, warm
from scheduling.engine.registry import close_backends
from tests.unit.scheduling.local_backend.helpers import JOB_UID, configured, finished, state_file
from tests.unit.scheduling.sessions.helpers import in_namespace, run, session

SYSTEM = WarmSpec(template="", cpus=1, memory_mb=256, count=2)


def free_ready(backend: LocalBackend) -> list[str]:
    store = backend.store
    return [
        key
        for key, state in warm.instances(store)
        if state.get("state") == "running" and warm.free(store, key, state)
    ]


def wait_ready(backend: LocalBackend, count: int, timeout: float = 10.0) -> list[str]:
    end = time.monotonic() + timeout
    while len(ready := free_ready(backend)) != count:
        if time.monotonic() > end:
            pytest.fail(f"{len(ready)} warm sandboxes ready, not {count}, after {timeout} s")
        time.sleep(0.02)
    return ready


def test_a_pool_is_kept_at_its_count_as_the_service_account(make):
    backend = make()
    views = backend.keep_warm([SYSTEM])
    assert [(v.template, v.ready + v.starting) for v in views] == [("", 2)]
    ready = wait_ready(backend, 2)
    backend.keep_warm([SYSTEM])  # asked again: nothing more is started
    assert sorted(free_ready(backend)) == sorted(ready)
    [view] = backend.keep_warm([SYSTEM])
    assert (view.ready, view.starting) == (2, 0)
    for key in ready:
        agent = state_file(backend, key)["sandbox_pid"]
        assert os.stat(f"/proc/{agent}").st_uid == JOB_UID
        assert not os.path.exists(backend.store.path(key, "request.json"))  # not a task


def test_a_claim_hands_a_warm_sandbox_over_and_a_replacement_starts(make):
    backend = make()
    backend.keep_warm([SYSTEM])
    ready = wait_ready(backend, 2)
    before = datetime.now(UTC)
    job = backend.claim_warm(session("claimed", memory_mib=256))
    assert job is not None and job.state is JobState.RUNNING
    assert job.started_at is not None and job.started_at >= before  # metered from the claim
    state = state_file(backend, "claimed")
    assert state["warm"] in ready
    assert backend.find("claimed") == job
    assert backend.poll(["claimed"])["claimed"].state is JobState.RUNNING
    assert run(backend, "claimed", "sh", "-c", "echo hi > f; cat f") == (0, "hi\n", "")
    # The pool goes back to two ready ones in the background, without the one handed out.
    replaced = wait_ready(backend, 2)
    assert state["warm"] not in replaced
    # The claimed session holds its node's capacity like any job.
    assert [n.free_cpus for n in backend.nodes()] == [3]


def test_a_claimed_session_ends_like_any_with_its_usage_from_the_claim(make):
    backend = make()
    backend.keep_warm([SYSTEM])
    wait_ready(backend, 2)
    time.sleep(1.0)  # the warm time before the claim is billed to no one
    job = backend.claim_warm(session("billed", memory_mib=256))
    assert job is not None
    run(backend, "billed", "sh", "-c", "sleep 600 &")
    namespace = os.readlink(f"/proc/{state_file(backend, 'billed')['sandbox_pid']}/ns/pid")
    time.sleep(0.5)
    backend.cancel("billed")
    ended = finished(backend, "billed")
    assert ended.state is JobState.CANCELLED
    end = time.monotonic() + 5
    while in_namespace(namespace) and time.monotonic() < end:
        time.sleep(0.05)
    assert in_namespace(namespace) == []
    [usage] = backend.usage(["billed"])["billed"]
    assert 500 <= usage.elapsed_ms < 1000 + 500  # the claim to the end, not the warm-up
    assert usage.started_at == job.started_at
    with pytest.raises(SessionGone):
        run(backend, "billed", "true")


def test_a_claimed_sessions_walltime_runs_from_the_claim(make):
    backend = make()
    backend.keep_warm([SYSTEM])
    wait_ready(backend, 2)
    job = backend.claim_warm(session("brief", memory_mib=256, walltime_s=1))
    assert job is not None
    assert finished(backend, "brief", timeout=10).state is JobState.TIMEOUT


def test_no_claim_without_a_warm_sandbox_of_the_shape(make):
    backend = make()
    assert backend.claim_warm(session("none", memory_mib=256)) is None
    backend.keep_warm([SYSTEM])
    wait_ready(backend, 2)
    assert backend.claim_warm(session("bigger", memory_mib=512)) is None
    assert backend.claim_warm(session("more-cpus", cpus=2, memory_mib=256)) is None
    assert backend.find("bigger") is None and len(free_ready(backend)) == 2


def test_a_pool_scaled_to_zero_leaves_no_warm_sandbox_running(make):
    backend = make()
    backend.keep_warm([SYSTEM])
    ready = wait_ready(backend, 2)
    pids = [state_file(backend, key)["sandbox_pid"] for key in ready]
    assert backend.keep_warm([]) == []
    end = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    backend.housekeep()
    assert warm.instances(backend.store) == []


def test_when_the_portal_stops_its_warm_sandboxes_stop_too(make, settings):
    """`manage.py up` closes the backends as it stops: unclaimed warm sandboxes would wait
    hours for a portal that is gone."""
    backend = make()
    settings.COMPUTE_BACKENDS = configured(backend)
    backend.keep_warm([SYSTEM])
    pids = [state_file(backend, key)["sandbox_pid"] for key in wait_ready(backend, 2)]
    close_backends()
    end = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def test_cancelling_a_claimed_warm_sandbox_by_its_own_key_ends_its_session(make):
    backend = make()
    backend.keep_warm([SYSTEM])
    wait_ready(backend, 2)
    assert backend.claim_warm(session("taken", memory_mib=256)) is not None
    warm_key = state_file(backend, "taken")["warm"]
    end = time.monotonic() + 5  # its supervisor takes the claim within a quarter second
    while state_file(backend, warm_key).get("claimed_by") != "taken":
        assert time.monotonic() < end, "the warm sandbox's supervisor did not take the claim"
        time.sleep(0.02)
    backend.cancel(warm_key)
    assert finished(backend, "taken").state is JobState.CANCELLED
    assert finished(backend, warm_key).state is JobState.CANCELLED


def test_cancelling_a_warm_sandbox_just_claimed_ends_its_session_too(make):
    """Before its supervisor has taken the claim (within a quarter second)."""
    backend = make()
    backend.keep_warm([SYSTEM])
    wait_ready(backend, 2)
    assert backend.claim_warm(session("quick", memory_mib=256)) is not None
    backend.cancel(state_file(backend, "quick")["warm"])
    assert finished(backend, "quick").state is JobState.CANCELLED
