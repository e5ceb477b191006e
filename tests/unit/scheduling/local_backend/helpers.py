"""What the local backend's tests share (and other tests of real local jobs): the queues and
node, building requests, waiting for a job with a deadline, reading its state and processes."""

from __future__ import annotations

import json
import os
import pwd
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from scheduling.backends.base import (
    Job,
    JobState,
    SubmitRequest,
)
from scheduling.backends.local import LocalBackend
from scheduling.backends.local.shim import proc_start_time
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.spec import Resources, TaskSpec

PACK = QueuePolicy(name="agents", pool="p", task_types=())
WHOLE = QueuePolicy(name="training", pool="p", task_types=(), allocation="whole-node")
SMALL = NodeView(name="n1", cpus=4, memory_mib=16384, gpus=2)


def deadline_wait(
    backend: LocalBackend, key: str, until: Callable[[Job], bool], timeout: float = 10.0
) -> Job:
    """Poll `key` until `until(job)` holds; fail with the last state seen after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        job = backend.poll([key])[key]
        if until(job):
            return job
        if time.monotonic() > end:
            pytest.fail(f"{key}: still {job.state} ({job.reason!r}) after {timeout} s")
        time.sleep(0.02)


def finished(backend: LocalBackend, key: str, timeout: float = 10.0) -> Job:
    return deadline_wait(backend, key, lambda j: j.state.finished, timeout)


def running(backend: LocalBackend, key: str, timeout: float = 10.0) -> Job:
    return deadline_wait(backend, key, lambda j: j.state is not JobState.PENDING, timeout)


def request(
    key: str,
    command: list[str] | None = None,
    *,
    script: str | None = None,
    type: str = "hpc-simulation",
    queue: QueuePolicy = PACK,
    cpus: int = 1,
    gpus: int = 0,
    memory_mib: int = 1024,
    walltime_s: int | None = None,
    env: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> SubmitRequest:
    spec = TaskSpec(
        name=key,
        project="materials",
        resources=Resources(cpus=cpus, gpus=gpus, memory_mib=memory_mib),
        walltime_s=walltime_s,
        command=tuple(command) if command is not None else None,
        script=script,
        env=tuple(sorted((env or {}).items())),
    )
    return SubmitRequest(
        key=key,
        spec=spec,
        type=type,
        queue=queue,
        project="materials",
        user="alice",
        extra=extra or {},
    )


def state_file(backend: LocalBackend, key: str) -> dict:
    return json.loads((Path(backend.root) / "jobs" / key / "state.json").read_text())


JOB_UID = pwd.getpwnam("switchyard-job").pw_uid if os.geteuid() == 0 else os.geteuid()


def in_folder(folder: str) -> list[int]:
    """Host pids of the living processes whose working directory is `folder`."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == folder and alive(int(pid)):
                pids.append(int(pid))
        except OSError:
            continue
    return pids


def alive(pid: int) -> bool:
    return proc_start_time(pid) is not None  # a zombie counts as gone


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def configured(backend: LocalBackend) -> dict:
    """`backend` as settings.COMPUTE_BACKENDS names it (`local`), for code that builds its
    backends from the settings (`close_backends`)."""
    return {
        "local": {
            "BACKEND": "scheduling.backends.local.LocalBackend",
            "RUNS_ON_THIS_HOST": True,
            "OPTIONS": {"root": backend.root},
        }
    }
