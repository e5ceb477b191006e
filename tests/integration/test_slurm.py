"""Switchyard against a real Slurm: the localhost cluster of docker/slurm/cluster.sh.

`.ci/run` starts the cluster; without it these tests fail in CI and skip elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from scheduling import engine
from scheduling.engine import get_backend
from scheduling.models import TERMINAL_STATES, Task, TaskState
from scheduling.selectors import site_view_invalidate
from tests.conftest import ROOT, descriptor, in_ci, no_lease_schedules, submit
from tests.integration.conftest import database_url, wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

STATE_DIR = Path(os.environ.get("SWITCHYARD_SLURM_DIR", "/var/tmp/switchyard-slurm"))
CLUSTER_SH = ROOT / "docker" / "slurm" / "cluster.sh"


def _cluster_env() -> dict[str, str]:
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
    env = _cluster_env()
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
def site(transactional_db, slurm, local_root):
    """The default site with every pool on Slurm, committed so a worker sees it."""
    call_command("seed_demo", backend="slurm", quiet=True)
    no_lease_schedules()
    site_view_invalidate()
    yield
    # Leave the cluster as we found it: a job left behind would hold nodes (or, once its
    # tmp folder is gone, sit in the queue as "launch failed requeued held").
    for backend_id in (
        Task.objects.filter(backend="slurm")
        .exclude(backend_id="")
        .exclude(state__in=TERMINAL_STATES)
        .values_list("backend_id", flat=True)
    ):
        with contextlib.suppress(Exception):
            slurm.cancel(backend_id)


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


def _submit(api, **fields) -> int:
    response = submit(api, descriptor(**fields))
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def _job_id(task: Task) -> str:
    return task.backend_id.partition(":")[0]


PROBE_FIELDS = {
    "hpc-simulation": {"resources": {"cpus": 2}},
    "ai-training": {"estimate": "1m", "resources": {"nodes": 1, "gpus": 2, "cpus": 8}},
    "ai-inference": {"resources": {"cpus": 1, "gpus": 1}},
    "agent": {},
    "sandbox": {},
}


def test_jobs_of_every_type_run_unprivileged_and_contained_on_slurm(site, api, settings):
    """The local backend's attacks from inside a job, on the real Slurm (docs/security.md)."""
    import pwd
    import socket

    from tests.unit.scheduling.test_isolation import probe

    server = socket.create_server(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    try:
        ids = {
            kind: _submit(
                api,
                name=f"probe-{kind.split('-')[-1]}",
                type=kind,
                walltime="5m",
                command=["bash", "-c", probe(port)],
                **fields,
            )
            for kind, fields in PROBE_FIELDS.items()
        }
        done = {t.type: t for t in drive(list(ids.values()), timeout=120)}
    finally:
        server.close()
    account = pwd.getpwnam(settings.SWITCHYARD_JOB_ACCOUNT)
    for kind, task in done.items():
        log = get_backend("slurm").log(task.backend_id)
        assert task.state == "succeeded", (kind, task.reason, log)
        assert f"uid={account.pw_uid} gid={account.pw_gid} " in log, (kind, log)
        assert "CapEff:\t0000000000000000" in log, (kind, log)
        for leak in ("REMOUNTED", "WROTE-ETC", "READ /etc", "SAW-", "NESTED-USERNS"):
            assert leak not in log, (kind, log)
        assert ("NETWORK" in log) is (kind not in ("agent", "sandbox")), (kind, log)
        assert log.rstrip().endswith("done"), (kind, log)


def test_every_workload_kind_succeeds_through_a_real_worker(site, api, start_worker, slurm_env):
    proc = start_worker()
    ids = {
        "hpc": _submit(
            api,
            name="hpc",
            type="hpc-simulation",
            resources={"cpus": 4},
            command=["sh", "-c", "echo hpc-ok"],
        ),
        "training": _submit(
            api,
            name="train",
            type="ai-training",
            estimate="1m",
            walltime="5m",
            resources={"nodes": 1, "gpus": 2, "cpus": 8, "memory": "8Gi"},
            command=["sh", "-c", "echo train-ok"],
        ),
        "agent": _submit(
            api, name="agent", type="agent", walltime="5m", command=["sh", "-c", "echo agent-ok"]
        ),
        "sandbox": _submit(
            api, name="box", type="sandbox", walltime="5m", command=["sh", "-c", "echo sandbox-ok"]
        ),
    }

    def all_done():
        tasks = Task.objects.filter(pk__in=ids.values())
        return all(t.is_terminal for t in tasks)

    try:
        wait_for(all_done, timeout=90, what="four tasks on Slurm", step=0.5)
    except AssertionError:
        raise AssertionError(worker_log(proc)) from None
    tasks = {name: Task.objects.get(pk=pk) for name, pk in ids.items()}
    for name, task in tasks.items():
        assert task.state == "succeeded", (name, task.reason)
        assert task.queue.name == {"hpc": "hpc", "training": "training"}.get(
            name, "inference-agent"
        )
        assert f"{name if name != 'training' else 'train'}-ok" in get_backend("slurm").log(
            task.backend_id
        )
    training = scontrol(_job_id(tasks["training"]), slurm_env)
    assert "Partition=training" in training
    assert "gres/gpu=8" in training  # the whole node, as OverSubscribe=EXCLUSIVE gives
    assert "NumCPUs=64" in training
    assert "Account=materials" in scontrol(_job_id(tasks["hpc"]), slurm_env)


def test_failure_timeout_cancel_and_a_pending_reason(site, api, slurm_env):
    failing = _submit(api, name="fails", command=None, script="echo about-to-fail\nexit 3\n")
    slow = _submit(api, name="slow", walltime="1m", command=["sleep", "600"])
    victim = _submit(api, name="victim", command=["sleep", "600"])
    # Two whole-node jobs fill the training partition (2 nodes); a third must wait.
    fillers = [
        _submit(
            api,
            name=f"fill{i}",
            type="ai-training",
            estimate="1m",
            walltime="10m",
            resources={"nodes": 1, "gpus": 8, "cpus": 64},
            command=["sleep", "600"],
        )
        for i in range(2)
    ]
    waiter = _submit(
        api,
        name="waiter",
        type="ai-training",
        estimate="1m",
        walltime="10m",
        resources={"nodes": 1, "gpus": 8, "cpus": 64},
        command=["true"],
    )

    drive([victim, *fillers], until=lambda t: t.state == "running", timeout=60)
    [waiting] = drive(
        [waiter], until=lambda t: t.state == "queued" and "waiting" in t.reason, timeout=60
    )
    assert "Slurm" in waiting.reason or "nodes" in waiting.reason or "priority" in waiting.reason
    response = api.get(f"/api/v1/tasks/{waiter}/").json()
    assert response["wait_reason"] == waiting.reason

    assert api.post(f"/api/v1/tasks/{victim}/cancel/").status_code == 202
    for pk in (*fillers, waiter):
        api.post(f"/api/v1/tasks/{pk}/cancel/")
    engine.cancel_requested([*fillers, waiter])  # what a worker does with the requests

    done = {t.pk: t for t in drive([failing, slow, victim], timeout=180)}
    assert (done[failing].state, done[failing].exit_code) == ("failed", 3)
    assert done[slow].state == "timeout", done[slow].reason
    assert done[victim].state == "cancelled"
    # the backend agrees: nothing of ours is still running
    assert "JobState=CANCELLED" in scontrol(_job_id(done[victim]), slurm_env)


def test_injection_attempts_take_no_effect(site, api, slurm_env, tmp_path):
    bad = [
        descriptor(name="a\n#SBATCH --account=other"),
        descriptor(env={"LD_PRELOAD": "/tmp/evil.so"}),
        descriptor(env={"SLURM_ACCOUNT": "other"}),
        descriptor(env={"GREETING": "x\n#SBATCH --account=other"}),
    ]
    for doc in bad:
        response = submit(api, doc)
        assert response.status_code == 400, doc
    assert Task.objects.count() == 0

    marker = tmp_path / "pwned"
    hostile = ["$(id)", "`id`", f"; touch {marker}", f"$(touch {marker})", "--account=other"]
    pk = _submit(
        api,
        name="inject",
        command=["printf", "%s|", *hostile],
        env={"GREETING": f"$(touch {marker})"},
    )
    [task] = drive([pk], timeout=60)
    assert task.state == "succeeded", task.reason
    assert get_backend("slurm").log(task.backend_id) == "".join(f"{h}|" for h in hostile)
    assert not marker.exists()
    job = scontrol(_job_id(task), slurm_env)
    assert "Account=materials" in job and "other" not in job.split("Command=")[0]


CRASH = """
import os, signal, sys
import django
django.setup()
from scheduling import engine
from scheduling.backends.slurm import SlurmBackend

original = SlurmBackend.submit

def submit_then_die(self, request):
    job = original(self, request)   # sbatch has returned: the job exists in Slurm
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the worker dies before the commit

SlurmBackend.submit = submit_then_die
engine.task_dispatch(int(sys.argv[1]))
"""


def test_a_worker_killed_after_sbatch_leaves_exactly_one_job_20_times(site, api, slurm_env):
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    ids = [_submit(api, name=f"crash{i}", command=["true"]) for i in range(20)]
    for pk in ids:
        done = subprocess.run(
            [sys.executable, "-c", CRASH, str(pk)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    # The dead dispatchers' leases run out; the engine dispatches again.
    Task.objects.filter(pk__in=ids).update(dispatch_lease_until=None)
    tasks = drive(ids, timeout=120)
    for task in tasks:
        assert task.state == "succeeded", task.reason
        assert task.attempts == 1
        assert len(sacct_runs(task.key, slurm_env)) == 1, task.key


def test_a_stopped_controller_loses_and_duplicates_nothing(site, api, slurm_env, settings):
    # A frozen controller makes every command wait for its time-out: keep that short here.
    slurm = settings.COMPUTE_BACKENDS["slurm"]
    settings.COMPUTE_BACKENDS = {
        **settings.COMPUTE_BACKENDS,
        "slurm": {**slurm, "OPTIONS": {**slurm["OPTIONS"], "command_timeout_s": 4.0}},
    }
    running = _submit(api, name="through", command=["sleep", "8"])
    drive([running], until=lambda t: t.state == "running", timeout=60)
    ctld = int((STATE_DIR / "run" / "slurmctld.pid").read_text())
    os.kill(ctld, signal.SIGSTOP)  # frozen: every Slurm command now times out
    try:
        later = [_submit(api, name=f"later{i}", command=["true"]) for i in range(3)]
        for pk in later:
            with pytest.raises(engine.DispatchRetry):
                engine.task_dispatch(pk)
        engine.backend_poll("slurm")
        for task in Task.objects.filter(pk__in=[running, *later]):
            assert task.state in ("pending", "running")
            assert "scheduler unreachable" in task.reason, task.reason
    finally:
        os.kill(ctld, signal.SIGCONT)
    tasks = drive([running, *later], timeout=120)
    for task in tasks:
        assert task.state == "succeeded", task.reason
        assert len(sacct_runs(task.key, slurm_env)) == 1


def test_one_squeue_and_one_sacct_per_poll_with_200_jobs(site, api):
    ids = [
        _submit(api, name=f"many{i}", type="agent", walltime="5m", command=["true"])
        for i in range(200)
    ]
    drive(ids, until=lambda t: t.state != "pending", timeout=240)
    backend = get_backend("slurm")
    backend.run.calls.clear()
    engine.backend_poll("slurm")
    assert backend.run.count("squeue") == 1
    assert backend.run.count("sacct") <= 1
    assert len(backend.run.calls) <= 2
    # Leave the cluster idle for whatever runs next.
    for task in Task.objects.filter(pk__in=ids).exclude(state__in=["succeeded"]):
        api.post(f"/api/v1/tasks/{task.pk}/cancel/")
    engine.cancel_requested(ids)  # what a worker does with the requests
    assert not Task.objects.filter(pk__in=ids, state__in=["pending", "queued", "running"]).exists()


def test_the_seed_chain_workflow_runs_on_slurm_in_order(site, api):
    from tests.integration.test_workflows import SEED_CHAIN

    response = api.post(
        "/api/v1/workflows/", data=json.dumps(SEED_CHAIN), content_type="application/json"
    )
    assert response.status_code == 201, response.json()
    workflow_id = response.json()["id"]
    ids = list(Task.objects.filter(workflow_id=workflow_id).values_list("pk", flat=True))
    tasks = {t.name: t for t in drive(ids, timeout=180)}
    assert all(t.state == "succeeded" for t in tasks.values()), {
        n: (t.state, t.reason) for n, t in tasks.items()
    }
    assert all(t.backend == "slurm" and t.backend_id for t in tasks.values())
    order = ["simulate", "train", "infer", "agent"]
    for before, after in zip(order, order[1:], strict=False):
        done = tasks[before].events.get(to_state="succeeded").at
        started = tasks[after].events.filter(to_state="queued").first().at
        assert done <= started, (before, after)
    detail = api.get(f"/api/v1/workflows/{workflow_id}/").json()
    assert detail["state"] == "succeeded"


def test_a_researcher_with_a_cluster_account_runs_as_it(site, api, researcher, settings):
    """Jobs run as the researcher's own Unix account when they have one (sbatch --uid)."""
    import pwd
    import shutil
    import uuid

    from portal.models import ClusterAccount

    unix = "sy-alice"
    try:
        pwd.getpwnam(unix)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", unix], check=True)
    ClusterAccount.objects.create(user=researcher, unix_username=unix)
    # The job folder must be reachable by that user (pytest's tmp dirs are private to root).
    workdir = Path("/var/tmp/switchyard-test-jobs") / uuid.uuid4().hex
    workdir.mkdir(parents=True)
    workdir.parent.chmod(0o755)
    workdir.chmod(0o755)
    slurm_options = settings.COMPUTE_BACKENDS["slurm"]["OPTIONS"]
    settings.COMPUTE_BACKENDS = {
        **settings.COMPUTE_BACKENDS,
        "slurm": {
            **settings.COMPUTE_BACKENDS["slurm"],
            "OPTIONS": {**slurm_options, "workdir": str(workdir)},
        },
    }
    try:
        pk = _submit(api, name="whoami", command=["id", "-un"])
        [task] = drive([pk], timeout=60)
        assert task.state == "succeeded", task.reason
        assert get_backend("slurm").log(task.backend_id).strip() == unix
        assert f"UserId={unix}(" in scontrol(_job_id(task), _cluster_env())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_controller_stopped_and_started_again_loses_nothing(site, api, slurm_env):
    running = _submit(api, name="survivor", command=["sleep", "6"])
    drive([running], until=lambda t: t.state == "running", timeout=60)
    pid_file = STATE_DIR / "run" / "slurmctld.pid"
    ctld = int(pid_file.read_text())
    os.kill(ctld, signal.SIGTERM)  # a clean stop: slurmctld saves its state and exits
    wait_for(lambda: not Path(f"/proc/{ctld}").exists(), timeout=30, what="slurmctld to stop")
    try:
        later = _submit(api, name="while-down", command=["true"])
        with pytest.raises(engine.DispatchRetry):
            engine.task_dispatch(later)
        engine.backend_poll("slurm")
        for task in Task.objects.filter(pk__in=[running, later]):
            assert "scheduler unreachable" in task.reason, task.reason
    finally:
        subprocess.run(["bash", str(CLUSTER_SH), "start"], check=True, capture_output=True)
    tasks = drive([running, later], timeout=120)
    for task in tasks:
        assert task.state == "succeeded", task.reason
        assert len(sacct_runs(task.key, slurm_env)) == 1


def test_a_level_change_reaches_slurm_as_the_jobs_priority(site, api, slurm_env):
    """Levels reach Slurm as the job's priority (sbatch --priority, then scontrol update)."""
    from django.contrib.auth.models import User

    from scheduling.services import priority_request_create, priority_request_decide

    def slurm_priority(task: Task) -> int:
        out = subprocess.run(
            ["squeue", "-h", "-j", _job_id(task), "-o", "%Q"],
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": "/usr/bin:/bin", "SLURM_CONF": slurm_env["SLURM_CONF"]},
        ).stdout
        return int(out.strip())

    # The hpc partition's two nodes are full, so the probe stays pending in Slurm.
    fill = _submit(
        api, name="fill", type="hpc-simulation", resources={"cpus": 128}, command=["sleep", "600"]
    )
    drive([fill], until=lambda t: t.state == "running", timeout=60)
    probe = _submit(
        api, name="probe", type="hpc-simulation", resources={"cpus": 8}, command=["true"]
    )
    [task] = drive([probe], until=lambda t: t.state == "queued", timeout=60)
    assert task.level == 0
    assert slurm_priority(task) == task.priority_value

    alice, quinn = User.objects.get(username="alice"), User.objects.get(username="quinn")
    request = priority_request_create(
        user=alice,
        task=task,
        level="high",
        reason="deadline",
        until=timezone.now() + timedelta(hours=1),
    )
    priority_request_decide(user=quinn, request=request, approve=True)
    task.refresh_from_db()
    assert task.level == 2
    assert slurm_priority(task) == task.priority_value  # scontrol update Priority=
    assert task.priority_value > 200_000_000  # the high band
    for pk in (fill, probe):
        api.post(f"/api/v1/tasks/{pk}/cancel/")
    engine.cancel_requested([fill, probe])


def test_project_shares_are_synced_to_the_slurm_accounts_fairshare(site, slurm_env):
    from portal.models import Project

    Project.objects.filter(slug="materials").update(share=5)
    call_command("slurm_sync_accounts", backend="slurm")
    out = subprocess.run(
        [
            "sacctmgr",
            "-n",
            "-P",
            "show",
            "assoc",
            "where",
            "account=materials",
            "format=account,user,fairshare",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": slurm_env["SLURM_CONF"]},
    ).stdout
    account_rows = [line for line in out.splitlines() if line.startswith("materials||")]
    assert account_rows and account_rows[0].endswith("|5"), out
