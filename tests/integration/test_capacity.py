"""Capacity on the local backend with a real worker: preemption, a lease, a lost node.

`.ci/run` runs these on PostgreSQL and Redis; elsewhere on the embedded default. The same
scenarios on the localhost Slurm are in tests/integration/slurm/test_capacity.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from scheduling.models import Alert, Attempt, Node, NodeLease, Task, TaskEvent
from scheduling.selectors import site_view
from scheduling.selectors.site import site_view_invalidate
from tests.conftest import descriptor, submit
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FAST = {
    "SWITCHYARD_PREEMPT_AFTER_S": "0",
    "SWITCHYARD_CAPACITY_MS": "300",
    "SWITCHYARD_HEALTH_MS": "500",
}


def only_up(pool: str, *names: str) -> None:
    Node.objects.filter(pool__name=pool).exclude(name__in=names).update(state=Node.State.DRAINED)
    site_view_invalidate()


def _submit(client: APIClient, name: str, **fields) -> int:
    response = submit(client, descriptor(name=name, **fields))
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains `marker` (a job's unique sleep)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found


def settle(ids: list[int], worker, *, timeout: float, what: str, done=lambda t: t.is_terminal):
    def check():
        tasks = list(Task.objects.filter(pk__in=ids))
        return all(done(t) for t in tasks) and tasks

    try:
        return wait_for(check, timeout=timeout, what=what, step=0.2)
    except AssertionError:
        states = ", ".join(
            f"{t.name}={t.state} ({t.reason})" for t in Task.objects.filter(pk__in=ids)
        )
        raise AssertionError(f"{what}: {states}\n{worker_log(worker)}") from None


def story(tasks: list[Task]) -> str:
    """Every event of these tasks in time order: what a failed assertion on them prints."""
    events = TaskEvent.objects.filter(task__in=tasks).select_related("task").order_by("at", "pk")
    return "\n".join(f"{e.at:%H:%M:%S.%f} {e.task.name}: {e.message}" for e in events)


@pytest.fixture
def admin_api(site) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="admin"))
    return client


def test_a_burst_of_agents_preempts_running_inference_only_and_everything_succeeds(
    site, api, start_worker
):
    only_up("inference-agent", "inf001")  # 4 GPUs
    worker = start_worker(extra_env=FAST)
    inference = [
        _submit(
            api,
            f"infer-{i}",
            type="ai-inference",
            resources={"gpus": 1, "cpus": 1},
            command=["sleep", "6"],
        )
        for i in range(4)
    ]
    training = _submit(
        api,
        "train",
        type="ai-training",
        estimate="1m",
        walltime="10m",
        resources={"nodes": 1, "gpus": 8, "cpus": 8},
        command=["sleep", "6"],
    )
    hpc = _submit(api, "hpc", type="hpc-simulation", resources={"cpus": 4}, command=["sleep", "6"])
    settle(
        inference + [training, hpc],
        worker,
        timeout=60,
        what="all running",
        done=lambda t: t.state == "running",
    )

    agents = [
        _submit(
            api,
            f"agent-{i}",
            type="agent",
            resources={"gpus": 1, "cpus": 1},
            command=["sleep", "1"],
        )
        for i in range(2)
    ]
    everything = inference + agents + [training, hpc]
    tasks = settle(everything, worker, timeout=120, what="all done")

    assert {t.name: t.state for t in tasks} == {t.name: "succeeded" for t in tasks}
    by_name = {t.name: t for t in tasks}
    preempted = sorted(t.name for t in tasks if t.preemptions)
    assert len(preempted) == 2 and all(n.startswith("infer-") for n in preempted), story(tasks)
    assert by_name["train"].preemptions == 0 and by_name["hpc"].preemptions == 0
    assert all(by_name[f"agent-{i}"].preemptions == 0 for i in range(2))
    for name in preempted:
        states = list(
            Attempt.objects.filter(task=by_name[name])
            .order_by("number")
            .values_list("state", flat=True)
        )
        assert states == ["preempted", "succeeded"]
    agent_events = " ".join(e.message for t in agents for e in Task.objects.get(pk=t).events.all())
    assert "preempted 1 medium-level preemptible task(s)" in agent_events


def test_a_lease_places_training_inside_it_and_reclaim_leaves_nothing_running(
    site, api, admin_api, start_worker
):
    only_up("gpu-train")  # training has nowhere to run but on lent nodes
    worker = start_worker(extra_env=FAST)
    response = admin_api.post(
        "/api/v1/leases/",
        {"pool": "inference-agent", "queue": "training", "count": 1, "until": "1h"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    lease = response.json()
    [lent] = lease["nodes"]
    inside = _submit(
        api,
        "inside",
        type="ai-training",
        estimate="10m",
        walltime="30m",
        resources={"nodes": 1, "gpus": 4, "cpus": 8},
        command=["sh", "-c", "exec sleep 3011"],
    )
    too_long = _submit(
        api,
        "too-long",
        type="ai-training",
        estimate="1h",
        walltime="2h",
        resources={"nodes": 1, "gpus": 4, "cpus": 8},
        command=["true"],
    )
    settle(
        [inside],
        worker,
        timeout=60,
        what="the task on the lent node runs",
        done=lambda t: t.state == "running",
    )
    assert Attempt.objects.get(task_id=inside, number=1).nodes == [lent]
    wait_for(lambda: processes_with("sleep 3011"), timeout=20, what="the job's process")
    assert Task.objects.get(pk=too_long).state == "queued"  # its walltime outlasts the lease

    assert admin_api.post(f"/api/v1/leases/{lease['id']}/end/").status_code == 200
    wait_for(
        lambda: NodeLease.objects.filter(pk=lease["id"], state="ended").exists(),
        timeout=30,
        what="the lease reclaimed",
    )
    wait_for(lambda: not processes_with("sleep 3011"), timeout=30, what="no process left")
    task = Task.objects.get(pk=inside)
    assert task.preemptions == 1 and task.state in ("pending", "queued")
    assert Attempt.objects.get(task=task, number=1).state == "preempted"
    assert NodeLease.objects.get(pk=lease["id"]).requeued == 1
    site_view_invalidate()
    assert lent in {n.name for n in site_view().pool_nodes["inference-agent"]}
    for pk in (inside, too_long):
        api.post(f"/api/v1/tasks/{pk}/cancel/")
    settle([inside, too_long], worker, timeout=30, what="cancelled")


def test_a_lost_node_is_isolated_its_work_rerun_elsewhere_and_admins_alerted(
    site, api, start_worker, local_root
):
    only_up("inference-agent", "inf001", "inf002")
    worker = start_worker(
        extra_env={**FAST, "SWITCHYARD_LOCAL_HEALTH_PROBE": "tests.integration.probes.file_probe"}
    )
    before = set(processes_with("sleep 3023"))  # none, unless an earlier run left some
    pk = _submit(
        api,
        "victim",
        type="ai-inference",
        retry_count=1,
        resources={"gpus": 1, "cpus": 1},
        command=["sh", "-c", "exec sleep 3023"],
    )
    settle([pk], worker, timeout=60, what="running", done=lambda t: t.state == "running")
    [first_node] = Attempt.objects.get(task_id=pk, number=1).nodes
    first_pids = wait_for(
        lambda: set(processes_with("sleep 3023")) - before, timeout=20, what="its processes"
    )
    (local_root / "test-health.json").write_text(
        json.dumps({first_node: {"ok": False, "down": True, "reason": "fake probe: lost"}})
    )
    node = wait_for(
        lambda: Node.objects.filter(name=first_node, state="down").first(),
        timeout=10,
        what="the node isolated within a check period",
    )
    assert node.health["reason"] == "fake probe: lost"
    rerun = wait_for(
        lambda: Attempt.objects.filter(task_id=pk, number=2, state="running").first(),
        timeout=30,
        what="the task running again",
    )
    assert rerun.nodes and rerun.nodes[0] != first_node
    first = Attempt.objects.get(task_id=pk, number=1)
    assert first.state == "failed" and "fake probe: lost" in first.reason
    wait_for(
        lambda: not set(first_pids) & set(processes_with("sleep 3023")),
        timeout=20,
        what="the lost node's copy gone",
    )
    assert Alert.objects.filter(kind="node", node=node).exists()
    mails = Path(worker.log_path).read_text()  # the console mail backend writes there
    assert f"Subject: [Switchyard] node {first_node} down: fake probe: lost" in mails
    api.post(f"/api/v1/tasks/{pk}/cancel/")
    settle([pk], worker, timeout=30, what="cancelled")
    wait_for(lambda: not processes_with("sleep 3023"), timeout=20, what="no process left")
