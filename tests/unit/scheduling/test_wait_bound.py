"""A bound on waiting (docs/policy.md): a task ready for longer than its queue's
`wait_bound_s` goes before every task of its pool that is not, and nothing passes it, in the
order's numbers, the live engine, the console and the simulator alike."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from scheduling.decisions.levels import HIGH, LOW, MEDIUM, LevelRule
from scheduling.decisions.order import (
    OVERDUE,
    OVERDUE_VALUE,
    on_room,
    order_key,
    overdue,
    priority_value,
)
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.engine import get_backend
from scheduling.engine.levels import relevel
from scheduling.models import Queue, Task
from scheduling.selectors import site_view_invalidate
from scheduling.spec import Resources, TaskSpec
from simulation.simulator.engine import simulate
from simulation.simulator.model import SimJob, Site
from tests.conftest import descriptor, submit

HPC = {"type": "hpc-simulation", "walltime": "1h", "resources": {"cpus": 4, "memory": "1Gi"}}


# -- the order ----------------------------------------------------------------------------


def test_past_the_bound_a_task_goes_before_every_level_first_ready_first():
    top = priority_value(level=HIGH, weight=10, share=1.0)
    assert priority_value(level=OVERDUE) == OVERDUE_VALUE > top
    assert priority_value(level=OVERDUE, weight=0.1, share=0.0, borrowed=True) == OVERDUE_VALUE
    assert OVERDUE_VALUE < 2**32 - 1  # Slurm's job priority is a uint32
    assert on_room(OVERDUE_VALUE, borrowed=True) == OVERDUE_VALUE  # borrowed or not: first

    def key(name, level, ready, **kw):
        return (order_key(level=level, weight=1, share=1, ready_at=ready, task_id=0, **kw), name)

    keys = [
        key("high-early", HIGH, 0.0),
        key("late-second", OVERDUE, 20.0),
        key("late-first-borrowed", OVERDUE, 10.0, borrowed=True),
        key("medium", MEDIUM, 5.0),
    ]
    assert [name for _, name in sorted(keys)] == [
        "late-first-borrowed",
        "late-second",
        "high-early",
        "medium",
    ]
    assert overdue(3601, 3600) and not overdue(3600, 3600) and not overdue(10**9, None)


# -- the live engine ----------------------------------------------------------------------


@pytest.fixture
def bounded(site):
    Queue.objects.filter(name="hpc").update(wait_bound_s=3600)
    site_view_invalidate()


@pytest.mark.django_db
def test_a_task_past_its_queues_bound_goes_first_and_the_backend_hears_of_it(api, bounded):
    response = submit(api, descriptor(name="patient", **HPC))
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    from scheduling import engine

    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    assert task.level == LOW and task.priority_value < OVERDUE_VALUE
    relevel(now=task.ready_at + timedelta(seconds=3599))
    task.refresh_from_db()
    assert task.priority_value < OVERDUE_VALUE
    relevel(now=task.ready_at + timedelta(seconds=3601))
    task.refresh_from_db()
    said = (
        "waited past queue hpc's bound of 1h: it goes before every task of its pool that has "
        "not, and nothing passes it"
    )
    assert task.level == LOW  # its level is the rule's; its place in the order is first
    assert task.priority_value == OVERDUE_VALUE
    assert task.level_reason == f"hpc-simulation tasks enter low; {said}"
    assert get_backend("fake").priority_of(task.backend_id) == OVERDUE_VALUE
    assert task.events.filter(message=said).count() == 1
    relevel(now=task.ready_at + timedelta(seconds=7200))  # said once
    assert task.events.filter(message=said).count() == 1


TRAINING = {
    "type": "ai-training",
    "estimate": "1h",
    "walltime": "2h",
    "resources": {"nodes": 2, "gpus": 16, "cpus": 16, "memory": "8Gi"},
}


@pytest.mark.django_db
def test_a_wait_its_quota_held_does_not_count_its_clock_starts_at_release(api, site):
    from scheduling import engine
    from scheduling.backends import JobState
    from scheduling.services.quotas import quota_set

    quota_set(project="materials", queue="training", resource="gpus", limit=32, borrowing_limit=0)
    Queue.objects.filter(name="training").update(wait_bound_s=600)
    site_view_invalidate()
    tasks = []
    for i in range(3):
        response = submit(api, descriptor(name=f"t{i}", **TRAINING))
        assert response.status_code == 201, response.json()
        tasks.append(Task.objects.get(pk=response.json()["id"]))
        engine.task_dispatch(tasks[-1].pk)
    first, _, held = (Task.objects.get(pk=t.pk) for t in tasks)
    assert (held.state, held.hold) == ("waiting", "quota")
    relevel(now=held.ready_at + timedelta(hours=2))  # held: its wait does not count
    held.refresh_from_db()
    assert held.priority_value < OVERDUE_VALUE and "bound" not in held.level_reason
    get_backend("fake").finish(first.backend_id, JobState.SUCCEEDED, exit_code=0)
    engine.backend_poll("fake")
    released = Task.objects.get(pk=held.pk)
    assert released.state == "pending" and released.ready_at > held.ready_at
    relevel(now=released.ready_at + timedelta(seconds=599))
    released.refresh_from_db()
    assert released.priority_value < OVERDUE_VALUE
    relevel(now=released.ready_at + timedelta(seconds=601))
    released.refresh_from_db()
    assert released.priority_value == OVERDUE_VALUE


@pytest.mark.django_db
def test_the_bound_is_edited_with_the_queue_and_shown_on_the_queues_page(site):
    api = APIClient()
    api.force_authenticate(User.objects.get(username="quinn"))  # the hpc queue's admin
    response = api.patch(
        "/api/v1/queues/hpc/", {"wait_bound_s": 30, "reason": "too short"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "wait_bound_s"
    assert "expected at least 60 (seconds), or empty for no bound; got 30" in str(response.json())
    response = api.patch(
        "/api/v1/queues/hpc/",
        {"wait_bound_s": 7200, "reason": "no HPC run waits a day"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert Queue.objects.get(name="hpc").wait_bound_s == 7200
    browser = Client()
    browser.force_login(User.objects.get(username="quinn"))
    page = browser.get("/queues/").content.decode()
    bound = page.split('id="wait-bound-hpc">')[1].split("</dd>")[0]
    assert bound == (
        "a task waiting over 2h goes before every task that has not, and nothing passes it"
    )
    assert 'value="2h"' in browser.get("/queues/hpc/edit/").content.decode()


# -- the simulator ------------------------------------------------------------------------


def _stream_site(bound: int | None) -> Site:
    """One 8-core node; agents enter high, HPC low (never rises)."""
    return Site(
        pools={"p": (NodeView("n1", cpus=8, memory_mib=65536),)},
        queues={"q": QueuePolicy(name="q", pool="p", task_types=(), wait_bound_s=bound)},
        level_rules=(LevelRule("agent", start=HIGH), LevelRule("hpc-simulation", start=LOW)),
    )


def _job(key: str, kind: str, submit: float, runtime: float, cpus: int) -> SimJob:
    spec = TaskSpec(
        name=key,
        project="p",
        resources=Resources(cpus=cpus, memory_mib=1024),
        walltime_s=int(runtime),
    )
    return SimJob(key, spec, kind, "q", submit, runtime)


def test_in_the_simulator_a_big_low_job_past_the_bound_is_never_passed_again():
    # Half-node agents, 10 min each, one every 150 s for 4 h: twice what the node holds, so
    # high-level agents always wait and take both reservations; the whole-node HPC run
    # behind them waits until the stream has drained. Past the bound it goes first and
    # starts as soon as the agents running then end.
    jobs = [_job("hpc", "hpc-simulation", 60, 1800, 8)]
    jobs += [_job(f"a{i:03d}", "agent", 150 * i, 600, 4) for i in range(96)]
    unbounded = simulate(jobs, _stream_site(None), "switchyard").outcomes["hpc"]
    assert unbounded.wait > 4 * 3600
    run = simulate(jobs, _stream_site(3600), "switchyard")
    waited = run.outcomes["hpc"].wait
    assert 3600 < waited <= 3600 + 600 + 1
    # It starts as the agents running when it passed the bound end: nothing took their room.
    late = 60 + 3600
    held = [o.end for o in run.outcomes.values() if o.key != "hpc" and o.start <= late < o.end]
    assert run.outcomes["hpc"].start == max(held)


def test_in_the_simulator_every_job_past_the_bound_keeps_its_place():
    # Three whole-node HPC runs behind the same stream: past the bound each has a
    # reservation of its own (beyond the pool's two), so they run one after another and no
    # agent, shorter as they are, starts between them.
    jobs = [_job(f"hpc{i}", "hpc-simulation", 60 + 10 * i, 1800, 8) for i in range(3)]
    jobs += [_job(f"a{i:03d}", "agent", 150 * i, 600, 4) for i in range(96)]
    run = simulate(jobs, _stream_site(3600), "switchyard")
    first, second, third = (run.outcomes[f"hpc{i}"] for i in range(3))
    assert second.start == first.end and third.start == second.end
    assert first.wait <= 3600 + 600 + 1


def test_schedule_pass_gives_each_job_past_its_bound_a_reservation_in_every_pool():
    """Two pools in one pass (the local backend's): in each, three whole-pool jobs past
    their bound that cannot start each get a reservation, beyond the usual two, one after
    the other; a short job with no bound behind them does not start in their room."""
    from scheduling.decisions.reserve import Busy
    from scheduling.decisions.schedule import Start, Wait, WaitingJob, schedule_pass
    from scheduling.decisions.types import NodeAllocation

    pools, busy, running, jobs = {}, [], {}, []
    for pool in ("p", "r"):
        queue = QueuePolicy(name=pool, pool=pool, task_types=())
        node = NodeView(f"{pool}1", cpus=4, memory_mib=16384)
        held = NodeAllocation(node.name, 2, 1024)  # half the node until 100
        pools[pool], running[node.name] = (node,), [held]
        busy.append(Busy(held, 100.0))
        for i in range(3):
            spec = TaskSpec(
                name=f"{pool}-late{i}",
                project="p",
                resources=Resources(cpus=4, memory_mib=1024),
                walltime_s=60,
            )
            jobs.append(WaitingJob(f"{pool}-late{i}", spec, queue, OVERDUE_VALUE, i))
        spec = TaskSpec(
            name=f"{pool}-short", project="p", resources=Resources(cpus=2, memory_mib=1024),
            walltime_s=150,
        )  # fmt: skip
        jobs.append(WaitingJob(f"{pool}-short", spec, queue, 1, 9))
    decided = {
        d.key: d
        for d in schedule_pass(
            jobs, pools=pools, allocations=running, running={}, now=0.0, busy=busy
        )
    }
    for pool in ("p", "r"):
        at = [decided[f"{pool}-late{i}"].reserved for i in range(3)]
        assert [r.at if r else None for r in at] == [100.0, 160.0, 220.0]
        short = decided[f"{pool}-short"]
        assert isinstance(short, Wait) and not isinstance(short, Start)
