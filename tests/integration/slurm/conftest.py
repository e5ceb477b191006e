"""Fixtures and helpers for the tests against a real Slurm: the localhost cluster of
docker/slurm/cluster.sh.

`.ci/run` starts the cluster; without it these tests fail in CI and skip elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from scheduling import engine
from scheduling.backends.slurm.capacity import DRAIN_PREFIX
from scheduling.backends.slurm.parse import slurm_json
from scheduling.engine import get_backend
from scheduling.models import TERMINAL_STATES, Node, Pool, Task, TaskState
from scheduling.selectors import site_view_invalidate
from scheduling.sites.slurm import ClusterSettings
from tests.conftest import ROOT, descriptor, in_ci, no_lease_schedules, submit
from tests.integration.conftest import fresh_storage_areas, wait_for

STATE_DIR = Path(os.environ.get("SWITCHYARD_SLURM_DIR", "/var/tmp/switchyard-slurm"))
CLUSTER_SH = ROOT / "docker" / "slurm" / "cluster.sh"


def cluster_env() -> dict[str, str]:
    env = {}
    env_file = STATE_DIR / "env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith("export "):
                name, _, value = line[len("export ") :].partition("=")
                env[name] = value
    return env


@pytest.fixture(scope="session")
def slurm_env() -> dict[str, str]:
    status = subprocess.run(["bash", str(CLUSTER_SH), "status"], capture_output=True, text=True)
    env = cluster_env()
    if status.returncode != 0 or "SLURM_CONF" not in env:
        message = f"the localhost Slurm cluster is not running ({CLUSTER_SH} start):\n{status.stdout[-800:]}"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return env


@pytest.fixture
def slurm(slurm_env, settings, job_root, monkeypatch):
    """The Slurm backend for this test, with its job folders where job accounts reach them."""
    workdir = job_root / "slurm-jobs"
    options = {
        "cluster": slurm_env.get("SWITCHYARD_SLURM_CLUSTER", "switchyard"),
        "slurm_conf": slurm_env["SLURM_CONF"],
        "workdir": str(workdir),
        "command_timeout_s": 20.0,
        "service_account": settings.SWITCHYARD_JOB_ACCOUNT,
    }
    settings.COMPUTE_BACKENDS = {
        **settings.COMPUTE_BACKENDS,
        "slurm": {"BACKEND": "scheduling.backends.slurm.SlurmBackend", "OPTIONS": options},
    }
    # A worker started by this test reads the same through its environment.
    monkeypatch.setenv("SLURM_CONF", options["slurm_conf"])
    monkeypatch.setenv("SWITCHYARD_SLURM_CLUSTER", options["cluster"])
    monkeypatch.setenv("SWITCHYARD_SLURM_WORKDIR", str(workdir))
    monkeypatch.setenv("SWITCHYARD_SLURM_TIMEOUT_S", "20")
    return get_backend("slurm")


@pytest.fixture
def site(transactional_db, slurm, local_root) -> Iterator[Path]:
    """The default site with every pool on Slurm, committed so a worker sees it, its storage
    areas in a fresh folder of this test's (`fresh_storage_areas`, yielded)."""
    resume_portal_drains(slurm)
    call_command("seed_demo", backend="slurm", quiet=True)
    # The cluster's GPUs are its fake device files (docker/slurm/cluster.sh makes them).
    cluster = ClusterSettings(state_dir=str(STATE_DIR))
    Pool.objects.update(
        gpu_devices=cluster.gpu_device_pattern, control_devices=list(cluster.control_devices)
    )
    no_lease_schedules()
    with fresh_storage_areas() as root:
        yield root
        # Leave the cluster as we found it: a job left behind would hold nodes (or, once
        # its tmp folder is gone, sit in the queue as "launch failed requeued held").
        for backend_id in (
            Task.objects.filter(backend="slurm")
            .exclude(backend_id="")
            .exclude(state__in=TERMINAL_STATES)
            .values_list("backend_id", flat=True)
        ):
            with contextlib.suppress(Exception):
                slurm.cancel(backend_id)


def resume_portal_drains(slurm) -> None:
    """Each test's portal starts with every node up: a drain an earlier test's portal left in
    the shared cluster (e.g. its worker's health check caught a restart of the daemons, where
    every node briefly stops responding) would hold that test's work forever."""
    data = slurm_json(slurm.run(["sinfo", "--json"]))
    for node in data.get("nodes", []):
        if str(node.get("reason") or "").startswith(DRAIN_PREFIX):
            slurm.resume(node.get("name") or node.get("hostname"))


def scontrol(job_id: str, env: dict[str, str]) -> str:
    return subprocess.run(
        ["scontrol", "show", "job", job_id],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": env["SLURM_CONF"]},
    ).stdout


def sacct_runs(key: str, env: dict[str, str]) -> list[str]:
    """Every Slurm job ever made under this name (-D: requeued runs too).

    slurmdbd records jobs a moment after slurmctld: wait until it shows at least one.
    """
    return wait_for(lambda: _sacct_runs(key, env), timeout=30, what=f"sacct to record {key}")


def _sacct_runs(key: str, env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [
            "sacct",
            "-D",
            "-X",
            "-n",
            "-P",
            "-o",
            "JobIDRaw",
            f"--name={key}",
            "--starttime=now-1days",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": env["SLURM_CONF"]},
    ).stdout
    return [line for line in out.splitlines() if line.strip()]


def drive(
    task_ids: list[int], *, until=lambda t: t.is_terminal, timeout: float = 120
) -> list[Task]:
    """Run the engine in this process (dispatch, then one batched poll a cycle) until done."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = list(Task.objects.filter(pk__in=task_ids).order_by("pk"))
        if all(until(t) for t in tasks):
            return tasks
        if time.monotonic() > deadline:
            raise AssertionError(
                "timed out: " + ", ".join(f"{t.name}={t.state} ({t.reason})" for t in tasks)
            )
        for task in tasks:
            if task.state == TaskState.PENDING:
                with contextlib.suppress(engine.DispatchRetry):
                    engine.task_dispatch(task.pk)
        # What a worker does with cancel requests.
        engine.cancel_requested([t.pk for t in tasks if t.cancelling])
        engine.backend_poll("slurm")
        time.sleep(0.5)


def submit_task(api, **fields) -> int:
    response = submit(api, descriptor(**fields))
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def job_id(task: Task) -> str:
    return task.backend_id.partition(":")[0]


@pytest.fixture
def cluster_site(site):
    """Only the nodes the localhost cluster has."""
    names = [
        line.split()[0]
        for line in (STATE_DIR / "etc" / "nodes.txt").read_text().split("\n")
        if line.strip()
    ]
    Node.objects.exclude(name__in=names).delete()
    site_view_invalidate()
    return names
