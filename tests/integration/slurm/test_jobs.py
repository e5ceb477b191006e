"""Switchyard against a real Slurm: the localhost cluster of docker/slurm/cluster.sh.

`.ci/run` starts the cluster; without it these tests fail in CI and skip elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from scheduling import engine
from scheduling.engine import get_backend
from scheduling.models import Task
from tests.conftest import ROOT, descriptor, submit
from tests.integration.conftest import database_url, wait_for, worker_log
from tests.integration.slurm.conftest import (
    CLUSTER_SH,
    STATE_DIR,
    cluster_env,
    drive,
    job_id,
    sacct_runs,
    scontrol,
    submit_task,
)

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

PROBE_FIELDS = {
    "hpc-simulation": {"resources": {"cpus": 2}},
    "ai-training": {"estimate": "1m", "resources": {"nodes": 1, "gpus": 2, "cpus": 8}},
    "ai-inference": {"resources": {"cpus": 1, "gpus": 1}},
    "agent": {},
    "sandbox": {},
}


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_jobs_of_every_type_run_unprivileged_and_contained_on_slurm(site, api, settings):
    """The local backend's attacks from inside a job, on the real Slurm (docs/security.md):
    privileges, files, and the network (tests/netprobe.py): no job reaches the control
    plane, batch jobs reach a test host through slirp4netns, agent and sandbox jobs nothing."""
    import pwd
    import socket

    from tests import netprobe
    from tests.unit.scheduling.test_isolation import blocking_through_settings, probe

    server = socket.create_server(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    with netprobe.test_host() as host, netprobe.control_plane() as ports:
        found = netprobe.targets(ports, host)
        blocking_through_settings(settings, host)
        try:
            ids = {
                kind: submit_task(
                    api,
                    name=f"probe-{kind.split('-')[-1]}",
                    type=kind,
                    walltime="5m",
                    command=["bash", "-c", probe(port) + netprobe.probe_command(found)],
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
        for leak in ("REMOUNTED", "WROTE-ETC", "READ /etc", "SAW-", "NESTED-USERNS", "NETWORK"):
            assert leak not in log, (kind, log)
        assert netprobe.tried(log) == {label for label, _, _ in found}, (kind, log)
        if kind in ("agent", "sandbox"):
            assert netprobe.reached(log) == set(), (kind, log)
        else:
            assert netprobe.reached(log) == {"host:reachable"}, (kind, log)
            assert f"REACHED host:reachable {netprobe.GREETING}" in log, (kind, log)


def test_every_workload_kind_succeeds_through_a_real_worker(site, api, start_worker, slurm_env):
    proc = start_worker()
    ids = {
        "hpc": submit_task(
            api,
            name="hpc",
            type="hpc-simulation",
            resources={"cpus": 4},
            command=["sh", "-c", "echo hpc-ok"],
        ),
        "training": submit_task(
            api,
            name="train",
            type="ai-training",
            estimate="1m",
            walltime="5m",
            resources={"nodes": 1, "gpus": 2, "cpus": 8, "memory": "8Gi"},
            command=["sh", "-c", "echo train-ok"],
        ),
        "agent": submit_task(
            api, name="agent", type="agent", walltime="5m", command=["sh", "-c", "echo agent-ok"]
        ),
        "sandbox": submit_task(
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
    training = scontrol(job_id(tasks["training"]), slurm_env)
    assert "Partition=training" in training
    assert "gres/gpu=8" in training  # the whole node, as OverSubscribe=EXCLUSIVE gives
    assert "NumCPUs=64" in training
    assert "Account=materials" in scontrol(job_id(tasks["hpc"]), slurm_env)


def test_failure_timeout_cancel_and_a_pending_reason(site, api, slurm_env):
    failing = submit_task(api, name="fails", command=None, script="echo about-to-fail\nexit 3\n")
    slow = submit_task(api, name="slow", walltime="1m", command=["sleep", "600"])
    victim = submit_task(api, name="victim", command=["sleep", "600"])
    # Two whole-node jobs fill the training partition (2 nodes); a third must wait.
    fillers = [
        submit_task(
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
    waiter = submit_task(
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
    assert "JobState=CANCELLED" in scontrol(job_id(done[victim]), slurm_env)


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
    pk = submit_task(
        api,
        name="inject",
        command=["printf", "%s|", *hostile],
        env={"GREETING": f"$(touch {marker})"},
    )
    [task] = drive([pk], timeout=60)
    assert task.state == "succeeded", task.reason
    assert get_backend("slurm").log(task.backend_id) == "".join(f"{h}|" for h in hostile)
    assert not marker.exists()
    job = scontrol(job_id(task), slurm_env)
    assert "Account=materials" in job and "other" not in job.split("Command=")[0]


CRASH = """
import os, signal, sys
import django
django.setup()
from scheduling import engine
from scheduling.backends.slurm import SlurmBackend

original = SlurmBackend.submit_many  # what dispatch calls, for one job or many

def submit_then_die(self, requests):
    jobs = original(self, requests)   # sbatch has returned: the job exists in Slurm
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the worker dies before the commit

SlurmBackend.submit_many = submit_then_die
engine.task_dispatch(int(sys.argv[1]))
"""


def test_a_worker_killed_after_sbatch_leaves_exactly_one_job_20_times(site, api, slurm_env):
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    ids = [submit_task(api, name=f"crash{i}", command=["true"]) for i in range(20)]
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
    running = submit_task(api, name="through", command=["sleep", "8"])
    drive([running], until=lambda t: t.state == "running", timeout=60)
    ctld = int((STATE_DIR / "run" / "slurmctld.pid").read_text())
    os.kill(ctld, signal.SIGSTOP)  # frozen: every Slurm command now times out
    try:
        later = [submit_task(api, name=f"later{i}", command=["true"]) for i in range(3)]
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
        submit_task(api, name=f"many{i}", type="agent", walltime="5m", command=["true"])
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
        pk = submit_task(api, name="whoami", command=["id", "-un"])
        [task] = drive([pk], timeout=60)
        assert task.state == "succeeded", task.reason
        assert get_backend("slurm").log(task.backend_id).strip() == unix
        assert f"UserId={unix}(" in scontrol(job_id(task), cluster_env())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_controller_stopped_and_started_again_loses_nothing(site, api, slurm_env):
    running = submit_task(api, name="survivor", command=["sleep", "6"])
    drive([running], until=lambda t: t.state == "running", timeout=60)
    pid_file = STATE_DIR / "run" / "slurmctld.pid"
    ctld = int(pid_file.read_text())
    os.kill(ctld, signal.SIGTERM)  # a clean stop: slurmctld saves its state and exits
    wait_for(lambda: not Path(f"/proc/{ctld}").exists(), timeout=30, what="slurmctld to stop")
    try:
        later = submit_task(api, name="while-down", command=["true"])
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


def test_a_level_change_reaches_slurm_as_the_jobs_priority(site, api, slurm_env, worker):
    """Levels reach Slurm as the job's priority (sbatch --priority, then scontrol update)."""
    from django.contrib.auth.models import User

    from scheduling.services import priority_request_create, priority_request_decide

    def slurm_priority(task: Task) -> int:
        out = subprocess.run(
            ["squeue", "-h", "-j", job_id(task), "-o", "%Q"],
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": "/usr/bin:/bin", "SLURM_CONF": slurm_env["SLURM_CONF"]},
        ).stdout
        return int(out.strip())

    # The hpc partition's two nodes are full, so the probe stays pending in Slurm.
    fill = submit_task(
        api, name="fill", type="hpc-simulation", resources={"cpus": 128}, command=["sleep", "600"]
    )
    drive([fill], until=lambda t: t.state == "running", timeout=60)
    probe = submit_task(
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
    with worker():  # the approval's relevel message, taken as a worker takes it
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


def test_a_claimed_batch_reaches_slurm_concurrently_once_each(site, api, slurm_env):
    ids = [
        submit_task(api, name=f"batch{i}", type="agent", walltime="5m", command=["true"])
        for i in range(12)
    ]
    backend = get_backend("slurm")
    assert backend.submit_concurrency > 1
    claimed = engine.claim_many(ids)
    assert claimed == ids
    assert engine.dispatch_claimed_many(claimed) == dict.fromkeys(ids, "submitted")
    assert engine.claim_many(ids) == []  # a redelivered message finds nothing to take
    tasks = drive(ids, timeout=180)
    assert {t.state for t in tasks} == {"succeeded"}
    assert len({t.backend_id for t in tasks}) == 12
    for task in tasks:
        assert len(sacct_runs(task.key, slurm_env)) == 1, task.key
