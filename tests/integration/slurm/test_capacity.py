"""Capacity on the localhost Slurm with a real worker: preemption, a lease as a partition,
a node whose slurmd is killed, and drains that reach `scontrol`.

The portal's inventory is cut to the cluster's own nodes (two per pool), so what the portal
decides matches what Slurm has.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from scheduling import services
from scheduling.engine.health import nodes_apply
from scheduling.models import Alert, Attempt, Node, NodeLease, Task
from tests.integration.conftest import wait_for, worker_log
from tests.integration.slurm.conftest import CLUSTER_SH, STATE_DIR, job_id, submit_task
from tests.integration.test_capacity import FAST, processes_with

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def slurm(*argv: str, env: dict[str, str], check: bool = True) -> str:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        check=check,
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "SLURM_CONF": env["SLURM_CONF"]},
    ).stdout


def node_state(name: str, env: dict[str, str]) -> tuple[str, str]:
    """Slurm's state of a node (e.g. IDLE+DRAIN) and its reason."""
    line = slurm("scontrol", "show", "node", name, "--oneliner", env=env)
    state = re.search(r"\bState=(\S+)", line)
    reason = re.search(r"\bReason=(.*?) \[", line)
    return (state.group(1) if state else "", reason.group(1) if reason else "")


@pytest.fixture
def admin_api(site) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="admin"))
    return client


def settle(ids, worker, *, timeout: float, what: str, done=lambda t: t.is_terminal):
    def check():
        tasks = list(Task.objects.filter(pk__in=ids))
        return all(done(t) for t in tasks) and tasks

    try:
        return wait_for(check, timeout=timeout, what=what, step=0.3)
    except AssertionError:
        states = ", ".join(
            f"{t.name}={t.state} ({t.reason})" for t in Task.objects.filter(pk__in=ids)
        )
        raise AssertionError(f"{what}: {states}\n{worker_log(worker)}") from None


def test_agents_preempt_running_inference_on_slurm_and_nothing_else(
    cluster_site, api, start_worker, slurm_env
):
    worker = start_worker(extra_env=FAST)
    inference = [
        submit_task(
            api,
            name=f"infer-{i}",
            type="ai-inference",
            resources={"gpus": 1, "cpus": 1},
            command=["sleep", "8"],
        )
        for i in range(4)
    ]
    training = submit_task(
        api,
        name="train",
        type="ai-training",
        estimate="1m",
        walltime="10m",
        resources={"nodes": 1, "gpus": 2, "cpus": 8},
        command=["sleep", "8"],
    )
    hpc = submit_task(
        api, name="hpc", type="hpc-simulation", resources={"cpus": 2}, command=["sleep", "8"]
    )
    settle(
        inference + [training, hpc],
        worker,
        timeout=90,
        what="all running",
        done=lambda t: t.state == "running",
    )
    agents = [
        submit_task(
            api,
            name=f"agent-{i}",
            type="agent",
            resources={"gpus": 1, "cpus": 1},
            command=["sleep", "1"],
        )
        for i in range(2)
    ]

    tasks = settle(inference + agents + [training, hpc], worker, timeout=180, what="all done")

    assert {t.name: t.state for t in tasks} == {t.name: "succeeded" for t in tasks}
    preempted = sorted(t.name for t in tasks if t.preemptions)
    assert len(preempted) == 2 and all(n.startswith("infer-") for n in preempted), preempted
    by_name = {t.name: t for t in tasks}
    assert by_name["train"].preemptions == 0 and by_name["hpc"].preemptions == 0
    for name in preempted:
        first = Attempt.objects.get(task=by_name[name], number=1)
        assert first.state == "preempted" and first.reason.startswith("preempted by task #")
        # Slurm has the first run as cancelled (portal-driven cancel and requeue).
        out = slurm(
            "sacct",
            "-X",
            "-n",
            "-P",
            "-o",
            "State",
            "-j",
            first.backend_id.partition(":")[0],
            env=slurm_env,
        )
        assert out.strip().startswith("CANCELLED"), out


def test_a_lease_becomes_a_partition_and_its_end_takes_the_node_back(
    cluster_site, api, admin_api, start_worker, slurm_env
):
    gpu_nodes = list(Node.objects.filter(pool__name="gpu-train"))
    services.nodes_set_state(nodes=gpu_nodes, state="drained", reason="lease test", by="test")
    nodes_apply([n.pk for n in gpu_nodes])  # the portal's drain reaches Slurm
    try:
        for node in gpu_nodes:
            state, reason = node_state(node.name, slurm_env)
            assert "DRAIN" in state and reason == "switchyard: lease test (test)"
        worker = start_worker(extra_env=FAST)
        response = admin_api.post(
            "/api/v1/leases/",
            {"pool": "inference-agent", "queue": "training", "count": 1, "until": "1h"},
            format="json",
        )
        assert response.status_code == 201, response.json()
        lease = response.json()
        assert lease["nodes"] == ["inf001"]  # the GPU node, not the agent node
        partition = f"lease-{lease['id']}"
        wait_for(
            lambda: (
                "inf001"
                in slurm("scontrol", "show", "partition", partition, env=slurm_env, check=False)
            ),
            timeout=20,
            what="the lease's partition",
        )
        assert "inf001" not in slurm(
            "sinfo", "-h", "-p", "inference-agent", "-o", "%N", env=slurm_env
        )
        inside = submit_task(
            api,
            name="inside",
            type="ai-training",
            estimate="10m",
            walltime="30m",
            resources={"nodes": 1, "gpus": 4, "cpus": 8},
            command=["sh", "-c", "exec sleep 3031"],
        )
        [task] = settle(
            [inside],
            worker,
            timeout=90,
            what="running on the lent node",
            done=lambda t: t.state == "running",
        )
        assert Attempt.objects.get(task=task, number=1).nodes == ["inf001"]
        assert f"Partition={partition}" in slurm(
            "scontrol", "show", "job", job_id(task), env=slurm_env
        )
        wait_for(lambda: processes_with("sleep 3031"), timeout=20, what="its process")

        assert admin_api.post(f"/api/v1/leases/{lease['id']}/end/").status_code == 200
        wait_for(
            lambda: NodeLease.objects.filter(pk=lease["id"], state="ended").exists(),
            timeout=60,
            what="the lease reclaimed",
        )
        wait_for(lambda: not processes_with("sleep 3031"), timeout=30, what="no process left")
        task.refresh_from_db()
        assert (
            task.preemptions == 1 and Attempt.objects.get(task=task, number=1).state == "preempted"
        )
        assert NodeLease.objects.get(pk=lease["id"]).requeued == 1
        assert "inf001" in slurm("sinfo", "-h", "-p", "inference-agent", "-o", "%N", env=slurm_env)
        gone = subprocess.run(
            ["scontrol", "show", "partition", partition],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", **slurm_env},
        )
        assert gone.returncode != 0
        api.post(f"/api/v1/tasks/{inside}/cancel/")
        settle([inside], worker, timeout=60, what="cancelled")
    finally:
        services.nodes_set_state(nodes=gpu_nodes, state="up", reason="", by="test")
        nodes_apply([n.pk for n in gpu_nodes])
    for node in gpu_nodes:
        assert "DRAIN" not in node_state(node.name, slurm_env)[0]


def test_a_node_whose_slurmd_is_killed_is_isolated_and_its_work_runs_elsewhere(
    cluster_site, api, start_worker, slurm_env
):
    worker = start_worker(extra_env={**FAST, "SWITCHYARD_HEALTH_MS": "1000"})
    pk = submit_task(
        api,
        name="survivor",
        type="hpc-simulation",
        retry_count=1,
        resources={"cpus": 1},
        command=["sh", "-c", "exec sleep 3041"],
    )
    settle([pk], worker, timeout=60, what="running", done=lambda t: t.state == "running")
    [lost] = Attempt.objects.get(task_id=pk, number=1).nodes
    first_pids = wait_for(lambda: processes_with("sleep 3041"), timeout=20, what="its process")
    pid_file = STATE_DIR / "run" / f"slurmd-{lost}.pid"
    os.kill(int(Path(pid_file).read_text().strip()), signal.SIGKILL)
    try:
        node = wait_for(
            lambda: Node.objects.filter(name=lost, state="down").first(),
            timeout=60,
            what="the node isolated (Slurm: not responding)",
            step=0.5,
        )
        assert node.health["reason"].startswith("Slurm says")
        rerun = wait_for(
            lambda: Attempt.objects.filter(task_id=pk, number=2, state="running").first(),
            timeout=60,
            what="the task running elsewhere",
            step=0.5,
        )
        assert rerun.nodes and rerun.nodes != [lost]
        assert Attempt.objects.get(task_id=pk, number=1).state == "failed"
        assert Alert.objects.filter(kind="node", node=node).exists()
        assert f"node {lost} down" in Path(worker.log_path).read_text()  # the mail
    finally:
        subprocess.run(["bash", str(CLUSTER_SH), "start"], check=True, capture_output=True)
    # Back, the node's slurmd kills what Slurm cancelled there: nothing of the lost run stays.
    wait_for(
        lambda: not set(first_pids) & set(processes_with("sleep 3041")),
        timeout=60,
        what="the lost run's processes gone",
        step=0.5,
    )
    api.post(f"/api/v1/tasks/{pk}/cancel/")
    settle([pk], worker, timeout=60, what="cancelled")


def test_a_drain_made_in_slurm_is_seen_by_the_health_check_and_the_portals_own_is_not(
    cluster_site, slurm_env
):
    from scheduling.engine.health import health_pass

    portal_drained = Node.objects.get(name="cpu001")
    services.nodes_set_state(nodes=[portal_drained], state="drained", reason="fan", by="test")
    nodes_apply([portal_drained.pk])
    slurm("scontrol", "update", "NodeName=cpu002", "State=DRAIN", "Reason=bad disk", env=slurm_env)
    try:
        assert health_pass()["drained"] == 1
        node = Node.objects.get(name="cpu002")
        assert node.state == "drained"
        assert node.health["reason"] == "drained by Slurm: bad disk"
        assert Alert.objects.filter(kind="node", node=node).count() == 1
        assert not Alert.objects.filter(node__name="cpu001").exists()
        assert health_pass()["drained"] == 0  # checked again: nothing new
    finally:
        for name in ("cpu001", "cpu002"):
            slurm("scontrol", "update", f"NodeName={name}", "State=RESUME", env=slurm_env)
