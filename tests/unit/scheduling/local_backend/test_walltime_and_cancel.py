"""The local backend with real processes: walltime, cancel, and the supervisor."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from scheduling.backends.base import (
    JobState,
)
from scheduling.backends.local import SUPERVISOR_DIED
from tests.unit.scheduling.local_backend.helpers import (
    SMALL,
    alive,
    deadline_wait,
    finished,
    group_gone,
    in_folder,
    request,
    running,
    state_file,
)

# -- walltime and cancel ------------------------------------------------------------------


def test_walltime_is_enforced(make):
    backend = make()
    t0 = time.monotonic()
    backend.submit(request("wall-1", ["sleep", "30"], walltime_s=1))
    job = finished(backend, "wall-1", timeout=8)
    assert job.state is JobState.TIMEOUT
    assert time.monotonic() - t0 < 5
    assert job.exit_code == 128 + signal.SIGTERM
    assert "walltime" in job.reason


def test_walltime_kills_a_job_that_ignores_sigterm_after_the_grace(make):
    backend = make()
    backend.submit(
        request(
            "wall-2",
            ["bash", "-c", "trap '' TERM; sleep 30"],
            walltime_s=1,
            extra={"kill_grace_s": "0.3"},
        )
    )
    job = finished(backend, "wall-2", timeout=8)
    assert (job.state, job.exit_code) == (JobState.TIMEOUT, 128 + signal.SIGKILL)


def test_cancel_kills_the_whole_process_group(make):
    backend = make()
    backend.submit(request("cancel-1", ["bash", "-c", "sleep 300 & sleep 300"]))
    assert running(backend, "cancel-1").state is JobState.RUNNING
    work = str(Path(backend.root) / "jobs" / "cancel-1" / "work")
    # The job's processes (host pids): bash and its two sleeps, all in the work folder.
    deadline_wait(backend, "cancel-1", lambda _: len(in_folder(work)) >= 3)
    pids = in_folder(work)
    child = state_file(backend, "cancel-1")["child_pid"]
    assert alive(child) and all(alive(pid) for pid in pids)

    backend.cancel("cancel-1")
    job = finished(backend, "cancel-1")
    assert job.state is JobState.CANCELLED
    deadline_wait(backend, "cancel-1", lambda _: not alive(child) and not in_folder(work))
    # The group itself is gone (once init has reaped the orphaned grandchild).
    deadline_wait(backend, "cancel-1", lambda _: group_gone(child))

    backend.cancel("cancel-1")  # cancelling a finished job is a no-op
    assert backend.poll(["cancel-1"])["cancel-1"].state is JobState.CANCELLED


def test_cancel_of_a_finished_job_is_a_no_op(make):
    backend = make()
    backend.submit(request("done-1", ["true"]))
    assert finished(backend, "done-1").state is JobState.SUCCEEDED
    backend.cancel("done-1")
    assert backend.poll(["done-1"])["done-1"].state is JobState.SUCCEEDED


def test_a_cancel_before_the_child_starts_is_not_lost(make, tmp_path):
    # A slow interpreter start widens the window between "supervisor spawned" and "child
    # started" so that the cancel lands inside it every time.
    slow_python = tmp_path / "slow-python"
    slow_python.write_text(f'#!/bin/sh\nsleep 0.3\nexec {sys.executable} "$@"\n')
    slow_python.chmod(0o755)
    # Through the launcher the supervisor is forked at once: the window is too short to hit.
    backend = make(python=str(slow_python), launcher=False)
    marker = Path(backend.root) / "jobs" / "early-1" / "work" / "ran"
    job = backend.submit(request("early-1", ["touch", "ran"]))
    assert job.state is JobState.PENDING  # placed, its supervisor starting
    backend.cancel("early-1")
    job = finished(backend, "early-1")
    assert job.state is JobState.CANCELLED
    assert not marker.exists()


# -- the supervisor -----------------------------------------------------------------------


def test_a_dead_supervisor_is_detected_and_its_job_killed(make):
    backend = make()
    backend.submit(request("dead-1", ["sleep", "30"]))
    assert running(backend, "dead-1").state is JobState.RUNNING
    state = state_file(backend, "dead-1")
    os.kill(state["shim_pid"], signal.SIGKILL)
    job = finished(backend, "dead-1")
    assert job.state is JobState.FAILED
    assert SUPERVISOR_DIED in job.reason
    deadline_wait(backend, "dead-1", lambda _: not alive(state["child_pid"]))
    # Its capacity is free again.
    assert backend.nodes()[0].free_cpus == SMALL.cpus


def test_a_reused_supervisor_pid_does_not_look_alive(make):
    backend = make()
    backend.submit(request("reused-1", ["sleep", "30"]))
    assert running(backend, "reused-1").state is JobState.RUNNING
    path = Path(backend.root) / "jobs" / "reused-1" / "state.json"
    state = json.loads(path.read_text())
    os.kill(state["shim_pid"], signal.SIGKILL)
    # As after a reboot: the recorded pid now names another, living process (this one), so
    # only the start time can tell that the supervisor is gone.
    state["shim_pid"] = os.getpid()
    path.write_text(json.dumps(state))
    job = finished(backend, "reused-1")
    assert job.state is JobState.FAILED
    assert job.reason.startswith(SUPERVISOR_DIED)
    deadline_wait(backend, "reused-1", lambda _: not alive(state["child_pid"]))
