"""Accounting on the localhost Slurm with a real worker: the portal's totals equal `sacct`'s,
reconciliation is clean, replays change nothing, and slurmdbd stopping loses nothing.

The workload is the launch mix, shortened in time: 50 short agent tasks, 2 training
tasks of 4 nodes × 8 GPUs, one HPC task of 256 cores (4 nodes of 64). The cluster grows to 4
nodes per pool for it and goes back to what it was afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Sum
from django.utils import timezone

from accounting.meter import meter, meter_pass
from accounting.models import Metered, UsageRecord
from accounting.reconcile import reconcile
from scheduling import engine
from scheduling.backends.slurm.usage import parse_tres
from scheduling.models import Attempt, Task
from scheduling.presenters.efficiency import task_efficiency
from tests.integration.conftest import wait_for, worker_log
from tests.integration.slurm.conftest import CLUSTER_SH, STATE_DIR, drive, submit_task

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

FAST = {"SWITCHYARD_METER_MS": "1000", "SWITCHYARD_RECONCILE_MS": "600000"}


def sacct_totals(job_ids: list[str], env: dict[str, str]) -> dict[str, int]:
    """What Slurm itself accounted for these jobs, every run: allocated TRES × elapsed, in
    the records' base units (core-ms, GPU-ms, MiB-ms)."""
    out = subprocess.run(
        [
            "sacct",
            "-X",
            "-D",
            "-P",
            "-n",
            "--starttime=now-1days",
            "--format=JobIDRaw,State,ElapsedRaw,AllocTRES",
            "--jobs=" + ",".join(job_ids),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": env["SLURM_CONF"], "TZ": "UTC"},
    ).stdout
    totals: dict[str, int] = defaultdict(int)
    for line in out.splitlines():
        _, _, elapsed, tres = line.split("|", 3)
        alloc = parse_tres(tres)
        ms = int(elapsed) * 1000
        totals["cpu"] += alloc.get("cpu", 0) * ms
        totals["gpu"] += alloc.get("gres/gpu", 0) * ms
        totals["memory"] += alloc.get("mem", 0) * ms
    return {k: v for k, v in totals.items() if v}


def portal_totals() -> dict[str, int]:
    rows = (
        UsageRecord.objects.exclude(metric="instance").values("metric").annotate(s=Sum("quantity"))
    )
    return {r["metric"]: r["s"] for r in rows}


def all_metered(ids: list[int]) -> bool:
    ended = Attempt.objects.filter(task_id__in=ids, ended_at__isnull=False)
    return ended.count() == len(ids) and Metered.objects.filter(attempt__in=ended).count() == len(
        ids
    )


def nodes_per_pool() -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for line in (STATE_DIR / "etc" / "nodes.txt").read_text().splitlines():
        if line.strip():
            counts[line.split()[0].rstrip("0123456789")] += 1
    return counts


@pytest.fixture
def launch_cluster(slurm_env):
    """The localhost cluster with 4 nodes per pool (12 slurmd), as long as the test runs."""
    before = nodes_per_pool()
    if before["gpu"] >= 4 and before["cpu"] >= 4:
        yield
        return

    def start(extra: dict[str, str]) -> None:
        env = {**os.environ, **extra}
        done = subprocess.run(
            ["bash", str(CLUSTER_SH), "start"], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    start({"SWITCHYARD_SLURM_NODES_PER_POOL": "4"})
    try:
        yield
    finally:
        start({})  # as the session started it (SWITCHYARD_SLURM_NODES_PER_POOL, default 2)


@pytest.fixture
def launch_site(launch_cluster, cluster_site):
    return cluster_site


def test_the_launch_mix_is_billed_exactly_as_slurm_accounted_it(
    launch_site, api, start_worker, slurm_env
):
    assert nodes_per_pool()["gpu"] >= 4 and nodes_per_pool()["cpu"] >= 4
    assert {"gpu001", "gpu004", "cpu004"} <= set(launch_site)
    started = timezone.now()
    worker = start_worker(extra_env=FAST)
    ids = [
        submit_task(
            api,
            name=f"agent-{i}",
            type="agent",
            walltime="5m",
            command=["sh", "-c", f"sleep {1 + i % 3}"],
        )
        for i in range(50)
    ]
    ids += [
        submit_task(
            api,
            name=f"train-{i}",
            type="ai-training",
            estimate="1m",
            walltime="5m",
            resources={"nodes": 4, "gpus": 32, "cpus": 32, "memory": "8Gi"},
            command=["sleep", "3"],
        )
        for i in range(2)
    ]
    ids.append(
        submit_task(
            api,
            name="hpc",
            type="hpc-simulation",
            walltime="5m",
            resources={"cpus": 256, "memory": "4Gi"},
            command=["sleep", "4"],
        )
    )

    def done():
        return all(t.is_terminal for t in Task.objects.filter(pk__in=ids))

    try:
        wait_for(done, timeout=240, what="the mix to finish", step=0.5)
        wait_for(lambda: all_metered(ids), timeout=60, what="every attempt metered", step=0.5)
    except AssertionError:
        states = [
            (t.name, t.state, t.reason)
            for t in Task.objects.filter(pk__in=ids)
            if not t.is_terminal
        ]
        raise AssertionError(f"{states}\n{worker_log(worker)}") from None
    assert set(Task.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"succeeded"}

    job_ids = [a.backend_id.partition(":")[0] for a in Attempt.objects.filter(task_id__in=ids)]
    theirs = sacct_totals(job_ids, slurm_env)
    assert portal_totals() == theirs
    assert theirs["gpu"] > 0 and theirs["cpu"] > 0
    instance = UsageRecord.objects.filter(metric="instance").aggregate(s=Sum("quantity"))["s"]
    assert UsageRecord.objects.filter(metric="instance").count() == 50 and instance >= 50 * 1000

    result = reconcile("slurm", started, timezone.now())
    assert (result.outcome, result.jobs, result.differences) == ("clean", 53, 0), result.details

    # Replaying the poll three times (and the metering) changes nothing.
    count, totals = UsageRecord.objects.count(), portal_totals()
    for _ in range(3):
        engine.backend_poll("slurm")
        meter(Attempt.objects.filter(task_id__in=ids).values_list("pk", flat=True))
        meter_pass()
    assert (UsageRecord.objects.count(), portal_totals()) == (count, totals)


def test_slurmdbd_down_while_jobs_finish_loses_nothing(cluster_site, api, start_worker, slurm_env):
    started = timezone.now()
    worker = start_worker(extra_env=FAST)
    ids = [
        submit_task(
            api,
            name=f"sim-{i}",
            type="hpc-simulation",
            walltime="5m",
            resources={"cpus": 4},
            command=["sleep", "4"],
        )
        for i in range(3)
    ]
    wait_for(
        lambda: Task.objects.filter(pk__in=ids, state="running").count() == 3,
        timeout=60,
        what="running",
        step=0.3,
    )
    dbd = int((STATE_DIR / "run" / "slurmdbd.pid").read_text().strip())
    os.kill(dbd, signal.SIGTERM)
    try:
        wait_for(lambda: not Path(f"/proc/{dbd}").exists(), timeout=30, what="slurmdbd stopped")
        # The jobs end while slurmdbd is down: the portal sees them end (squeue) ...
        wait_for(
            lambda: all(t.is_terminal for t in Task.objects.filter(pk__in=ids)),
            timeout=60,
            what="the jobs to end",
            step=0.5,
        )
        # ... but cannot meter them yet, and reconciliation says it could not run.
        assert not Metered.objects.filter(attempt__task_id__in=ids).exists()
        failed = reconcile("slurm", started, timezone.now())
        assert failed.outcome == "failed"
    finally:
        subprocess.run(["bash", str(CLUSTER_SH), "start"], check=True, capture_output=True)
    wait_for(lambda: all_metered(ids), timeout=90, what="metered once slurmdbd is back", step=1)
    job_ids = [a.backend_id.partition(":")[0] for a in Attempt.objects.filter(task_id__in=ids)]
    assert portal_totals() == sacct_totals(job_ids, slurm_env)
    later = reconcile("slurm", started, timezone.now() + timedelta(seconds=1))
    assert (later.outcome, later.jobs) == ("clean", 3), later.details
    assert worker.poll() is None


def test_what_a_slurm_job_really_used_is_measured_and_advised(site, api, slurm_env):
    """TotalCPU from sacct (the job line, which -X leaves out) reaches the attempt, and the
    task page advises a smaller request: 4 CPUs asked, one kept busy for 6 s (Slurm samples
    the sandboxed processes every 2 s)."""
    task_id = submit_task(
        api,
        name="one-core-of-four",
        type="hpc-simulation",
        resources={"cpus": 4},
        command=[
            "sh",
            "-c",
            'end=$(($(date +%s) + 6)); while [ "$(date +%s)" -lt "$end" ]; do :; done',
        ],
    )
    (task,) = drive([task_id], timeout=120)
    assert task.state == "succeeded", task.reason
    attempt = task.attempt_set.get()

    def measured() -> bool:
        meter([attempt.pk])
        attempt.refresh_from_db()
        return attempt.cpu_ms is not None

    wait_for(measured, timeout=60, what="the attempt's CPU time from sacct", step=2)
    assert 2000 <= attempt.cpu_ms <= attempt.cpu_elapsed_ms * 1.2, (
        attempt.cpu_ms,
        attempt.cpu_elapsed_ms,
    )
    found = task_efficiency(task)
    assert found.used_cpus < 2 and found.advice().startswith("Asked 4 CPUs")
