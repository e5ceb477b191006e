"""A GPU job's measured use: nvidia-smi sampled by the local supervisor and by the Slurm job's
watcher, stored on the attempt when it is metered, shown on the task page, and the
over-request advice that names it (docs/operations.md, "GPU use and GPU health").

nvidia-smi is the stand-in that prints an H200 node's answers (tests/gpufake.py), on
PATH where the portal looks for the real one; the jobs are real processes in bubblewrap, and
the stand-in is told their host pids as the driver would know the processes holding a
context."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from accounting.meter import meter
from scheduling import engine
from scheduling.backends import gpuwatch
from scheduling.backends.local.jobwatch import process_tree
from scheduling.backends.slurm.watch import read_gpu_use, read_usage, watched
from scheduling.decisions.types import GpuUse
from scheduling.engine import get_backend
from scheduling.models import Attempt, Pool, Task, TaskState
from scheduling.presenters.efficiency import GpuEfficiency
from scheduling.selectors import site_view_invalidate
from scheduling.selectors.gpuuse import used_gpus_by_pool
from tests.conftest import descriptor, submit
from tests.gpufake import RECORDED
from tests.unit.scheduling.local_backend.helpers import finished, running, state_file

# -- what nvidia-smi prints, read -------------------------------------------------------------


def test_the_recorded_gpu_rows_are_read_with_their_numbers_and_na_as_none():
    gpus = gpuwatch.parse_gpus((RECORDED / "query-gpu-training.csv").read_text())
    assert len(gpus) == 8
    assert gpus[2] == {
        "index": 2,
        "uuid": "GPU-5f3e2b1a-9c4d-4e8f-a6b7-000000000002",
        "util": 31.0,
        "memory_used": 40736.0,
        "memory_total": 143771.0,
        "temperature": 41.0,
        "ecc": 0.0,
    }
    # ECC off (a GPU that has none to count) and an error line in the output.
    text = (
        "0, GPU-aa, 7, 100, 81559, 35, [N/A]\n"
        "Unable to determine the device handle for GPU 0000:9B:00.0: Unknown Error\n"
    )
    [only] = gpuwatch.parse_gpus(text)
    assert (only["ecc"], only["temperature"]) == (None, 35.0)


def test_a_jobs_sample_counts_only_its_own_processes_gpus_and_memory():
    gpus = gpuwatch.parse_gpus((RECORDED / "query-gpu-training.csv").read_text())
    apps = [(10, 40211.0, gpus[2]["uuid"]), (11, 40187.0, gpus[5]["uuid"])]
    apps.append((99, 70000.0, gpus[7]["uuid"]))  # another job's process
    sampler = gpuwatch.GpuSampler("nvidia-smi", 10, now=0.0)
    assert sampler.summary() is None  # nothing sampled: nothing said
    sampler.add(gpus, apps, {10, 11, 12})
    sampler.add(gpus, apps[:1], {10, 11, 12})  # one process left its GPU
    assert sampler.summary() == {
        "samples": 2,
        "gpus_busy": 2,
        "util_mean": round((31 + 29 + 31) / 3, 1),
        "util_peak": 31.0,
        "memory_peak_mib": 80398,
    }


def test_the_stand_in_refuses_fields_it_has_no_recording_of(nvidia_smi):
    done = subprocess.run(
        [nvidia_smi.path, "--query-gpu=index,power.draw", gpuwatch.CSV],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "no recording" in done.stderr
    assert gpuwatch.query(str(nvidia_smi.path), "--query-gpu=index,power.draw") is None


# -- the local supervisor, a real job ---------------------------------------------------------


def _job_pids(backend, key: str, timeout: float = 10.0) -> list[int]:
    """Host pids of the job's processes in its sandbox, once its command runs."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        sandbox = state_file(backend, key).get("sandbox_pid")
        tree = process_tree(sandbox) if sandbox else []
        if len(tree) >= 2:
            return tree
        time.sleep(0.05)
    pytest.fail(f"{key}: no process in its sandbox after {timeout} s")


@pytest.fixture
def gpu_site(site, settings):
    """The demo site on the local backend, sampling GPUs every half second."""
    settings.SWITCHYARD_GPU_SAMPLE_S = 0.5
    Pool.objects.update(backend="local")
    site_view_invalidate()


def test_a_gpu_task_stores_its_gpu_use_and_its_page_names_the_over_request(
    gpu_site, api, browser, nvidia_smi
):
    nvidia_smi.scene("training")
    doc = descriptor(name="train", type="ai-training", estimate="5m")
    doc["resources"] = {"gpus": 8, "cpus": 8, "nodes": 1, "memory": "8Gi"}
    doc["command"] = ["sh", "-c", "sleep 3 & sleep 3; wait"]
    made = submit(api, doc)
    assert made.status_code == 201, made.json()
    task = Task.objects.get(pk=made.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted"
    task.refresh_from_db()
    backend = get_backend("local")
    running(backend, task.backend_id)
    # Two of its processes hold the recorded contexts, on GPUs 2 and 5.
    nvidia_smi.holding(_job_pids(backend, task.backend_id)[-2:])
    job = finished(backend, task.backend_id, timeout=30)
    assert job.state.name == "SUCCEEDED", job.reason
    sampled = state_file(backend, task.backend_id)["gpu"]
    assert sampled["samples"] >= 2 and sampled["gpus_busy"] == 2, sampled
    # 31 % and 29 %; a sample taken as one of the two processes ended sees one GPU only.
    assert 29.5 <= sampled["util_mean"] <= 30.5 and sampled["util_peak"] == 31.0, sampled
    assert sampled["memory_peak_mib"] == 40211 + 40187

    engine.backend_poll("local")
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED, task.reason
    attempt = Attempt.objects.get(task=task)
    assert meter([attempt.pk]) > 0
    attempt.refresh_from_db()
    assert (attempt.gpu_busy, attempt.gpu_util_mean, attempt.gpu_memory_peak_mib) == (
        2,
        sampled["util_mean"],
        80398,
    )
    assert (attempt.gpu_samples, attempt.gpu_util_peak) == (sampled["samples"], 31.0)
    assert attempt.cpu_ms is not None  # the CPU time is still measured beside it

    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert 'id="gpu-use"' in page
    assert "its processes used 2, at 30 % on average (peak 31 %)" in page
    assert "holding at most 80398 MiB of GPU memory" in page
    assert "Asked 8 GPUs, used 2 at 30 %: asking for 2 next time" in page

    pool = task.queue.pool.name
    window = used_gpus_by_pool(since=attempt.started_at, until=attempt.ended_at)
    assert window == {pool: 2.0}


def test_a_cpu_task_samples_nothing_and_its_page_says_nothing_of_gpus(
    gpu_site, api, browser, nvidia_smi
):
    made = submit(api, descriptor(command=["true"]))
    task = Task.objects.get(pk=made.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted"
    task.refresh_from_db()
    backend = get_backend("local")
    finished(backend, task.backend_id, timeout=30)
    assert "gpu" not in state_file(backend, task.backend_id)
    engine.backend_poll("local")
    meter([Attempt.objects.get(task=task).pk])
    assert Attempt.objects.get(task=task).gpu_samples is None
    assert 'id="gpu-use"' not in browser.get(f"/tasks/{task.pk}/").content.decode()


# -- the advice ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "used", "util", "says"),
    [
        (8, 2, 30.0, "Asked 8 GPUs, used 2 at 30 %: asking for 2 next time"),
        (4, 0, 0.0, "Asked 4 GPUs, used none"),
        (2, 2, 12.0, "Asked 2 GPUs, used 2 at 12 %: the GPUs waited"),
        (1, 1, 85.0, None),
    ],
)
def test_the_gpu_advice_names_the_over_request_or_keeps_quiet(asked, used, util, says):
    advice = GpuEfficiency(asked, used, util, util, 1000, 10).advice()
    if says is None:
        assert advice is None
    else:
        assert advice is not None and advice.startswith(says), advice


# -- the Slurm job's watcher: its script lines, run by bash ---------------------------------


def test_the_slurm_watcher_samples_the_jobs_gpus_and_writes_them_beside_its_cpu_time(
    nvidia_smi, tmp_path: Path, settings
):
    settings.SWITCHYARD_GPU_SAMPLE_S = 0.5
    nvidia_smi.scene("training")
    pids = nvidia_smi.folder / "nvidia-smi.pids"
    # The job says which of its processes hold the contexts (it runs without a sandbox here,
    # so its pids are the host's), and shows that the watcher's period is not in its env.
    job = (
        f'echo "$$" > {pids}.tmp; sleep 3 & echo "$!" >> {pids}.tmp; mv {pids}.tmp {pids}; '
        'echo "period=${SWITCHYARD_GPU_SAMPLE_S-unset}"; wait'
    )
    out = tmp_path / "usage"
    script = "\n".join(watched(["sh", "-c", job], str(out)))
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_GPUS": "2,5"}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "period=unset" in done.stdout
    assert read_usage(str(out)) is not None
    found = read_gpu_use(str(out))
    assert found is not None and found.samples >= 3  # every half second for ~2.5 s
    assert (found.gpus_busy, found.memory_peak_mib, found.util_peak) == (2, 80398, 31.0)
    assert 29.0 <= found.util_mean <= 31.0  # 31 and 29, or one alone as the job ended


def test_a_slurm_job_without_gpus_writes_its_cpu_time_alone(nvidia_smi, tmp_path: Path):
    out = tmp_path / "usage"
    script = "\n".join(watched(["sh", "-c", "true"], str(out)))
    env = {"PATH": os.environ["PATH"]}  # no SLURM_JOB_GPUS: Slurm gave it none
    assert subprocess.run(["bash", "-c", script], env=env).returncode == 0
    assert read_usage(str(out)) is not None and read_gpu_use(str(out)) is None
    out.write_text("120\nnot json\n")  # the job's account can write it: never trusted far
    assert read_usage(str(out)) == 120 and read_gpu_use(str(out)) is None
    fine = {"samples": 3, "gpus_busy": 1, "util_mean": 40.0, "util_peak": 55.0}
    fine["memory_peak_mib"] = 1000
    for spoiled in (
        {**fine, "gpus_busy": -1},
        {**fine, "util_mean": 400.0, "util_peak": 400.0},
        {**fine, "util_mean": float("nan")},
        {**fine, "memory_peak_mib": 1 << 40},
        {**fine, "samples": "many"},
        [fine],
    ):
        out.write_text(f"120\n{json.dumps(spoiled)}\n")
        assert read_gpu_use(str(out)) is None, spoiled
    out.write_text(f"120\n{json.dumps(fine)}\n")
    assert read_gpu_use(str(out)) == GpuUse(3, 1, 40.0, 55.0, 1000)
