"""The local backend with real processes and real bubblewrap: running, exit codes, logs, the
environment. No mocks: every job really runs, and every test's jobs are cancelled at teardown."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.backends.base import (
    Backend,
    BackendError,
    JobState,
    raw_length,
)
from scheduling.decisions.types import NodeView
from tests.unit.scheduling.local_backend.helpers import (
    JOB_UID,
    deadline_wait,
    finished,
    request,
    running,
)

# -- running, exit codes, logs ------------------------------------------------------------


def test_is_a_backend(make):
    assert isinstance(make(), Backend)


def test_a_command_that_succeeds(make):
    backend = make()
    job = backend.submit(request("ok-1", ["sh", "-c", "echo hello; echo oops >&2"]))
    assert job.backend_id == "ok-1"
    job = finished(backend, "ok-1")
    assert (job.state, job.exit_code, job.nodes) == (JobState.SUCCEEDED, 0, ("n1",))
    assert job.started_at is not None and job.ended_at is not None
    assert job.started_at <= job.ended_at
    assert backend.log("ok-1") == "hello\noops\n"
    assert backend.log("ok-1", offset=2, limit=3) == "llo"


# A child that burns `seconds` of CPU time (a wall-clock loop gets less under load).
BUSY = "/usr/bin/python3 -I -S -c 'import time\nwhile time.process_time() < {seconds}: pass'"


def test_the_cpu_time_a_job_really_used_is_measured_inside_the_sandbox(make):
    """A job that uses 1.5 s of one core, then sleeps: its usage says so, whatever the
    sandbox's init does with the processes it reaps (docs/console.md). The loop counts its own
    CPU time, not the clock, so a busy machine only makes it take longer."""
    backend = make()
    busy = BUSY.format(seconds=1.5)
    backend.submit(request("cpu-1", ["sh", "-c", f"({busy}); sleep 0.5"], cpus=4))
    finished(backend, "cpu-1", timeout=20)
    (run,) = backend.usage(["cpu-1"])["cpu-1"]
    assert 1000 <= run.cpu_ms <= run.elapsed_ms + 200, (run.cpu_ms, run.elapsed_ms)
    idle = backend.submit(request("cpu-2", ["sleep", "1"]))
    finished(backend, idle.backend_id, timeout=20)
    (run,) = backend.usage(["cpu-2"])["cpu-2"]
    assert run.cpu_ms < 300, run.cpu_ms


def test_a_failing_command_keeps_its_exit_code(make):
    backend = make()
    backend.submit(request("fail-1", ["sh", "-c", "exit 3"]))
    job = finished(backend, "fail-1")
    assert (job.state, job.exit_code, job.reason) == (JobState.FAILED, 3, "exit code 3")


def test_a_script_runs_with_bash_from_a_file_only_the_job_can_read(make):
    backend = make()
    backend.submit(request("script-1", script='echo "in $PWD"\nexit 4\n'))
    job = finished(backend, "script-1")
    jobdir = Path(backend.root) / "jobs" / "script-1"
    assert (job.state, job.exit_code) == (JobState.FAILED, 4)
    assert backend.log("script-1") == f"in {jobdir / 'work'}\n"
    script = (jobdir / "script.sh").stat()
    assert script.st_mode & 0o777 == 0o500
    assert script.st_uid == JOB_UID


def test_a_death_by_signal_is_128_plus_the_signal(make):
    backend = make()
    backend.submit(request("sig-1", ["sh", "-c", "kill -9 $$"]))
    job = finished(backend, "sig-1")
    assert (job.state, job.exit_code) == (JobState.FAILED, 137)
    assert "SIGKILL" in job.reason


def test_a_command_that_does_not_exist_fails_with_the_reason(make):
    backend = make()
    backend.submit(request("nocmd-1", ["/nonexistent/program"]))
    job = finished(backend, "nocmd-1")
    assert (job.state, job.exit_code) == (JobState.FAILED, 127)
    assert "No such file" in job.reason


def test_the_log_is_decoded_with_replacement(make):
    backend = make()
    backend.submit(request("bytes-1", ["printf", "a\\377b"]))
    finished(backend, "bytes-1")
    assert backend.log("bytes-1") == "a\ufffdb"


def test_a_log_readers_next_offset_counts_raw_bytes_past_invalid_utf8(make):
    backend = make()
    backend.submit(request("bytes-2", ["printf", "a\\377\\376b"]))
    finished(backend, "bytes-2")
    # 4 bytes of log, shown as 8 bytes of UTF-8 text: a reader that added 8 would skip what
    # followed. raw_length is what the log API gives as next_offset.
    first = backend.log("bytes-2", limit=3)
    assert first == "a\ufffd\ufffd" and raw_length(first) == 3
    assert backend.log("bytes-2", offset=raw_length(first)) == "b"


def test_unknown_ids(make):
    backend = make()
    assert backend.find("nope") is None
    assert backend.poll(["nope"])["nope"].state is JobState.UNKNOWN
    assert backend.log("nope") == ""
    assert backend.poll(["../etc"])["../etc"].state is JobState.UNKNOWN
    backend.cancel("nope")  # a no-op


def test_a_request_that_cannot_run_safely_is_refused(make):
    backend = make()
    with pytest.raises(BackendError, match="key"):
        backend.submit(request("../evil", ["true"]))
    with pytest.raises(BackendError, match="env"):
        backend.submit(request("env-1", ["true"], env={"lower": "x"}))
    with pytest.raises(BackendError, match="command"):
        backend.submit(request("none-1"))


# -- environment ------------------------------------------------------------------------


def test_the_child_gets_a_fresh_environment_without_the_portals_secrets(make, monkeypatch):
    monkeypatch.setenv("SWITCHYARD_TEST_SECRET", "hunter2")
    backend = make()
    backend.submit(request("env-2", ["env"], env={"OMP_NUM_THREADS": "1"}))
    assert finished(backend, "env-2").state is JobState.SUCCEEDED
    env = dict(line.split("=", 1) for line in backend.log("env-2").splitlines())
    assert "SWITCHYARD_TEST_SECRET" not in env
    assert "hunter2" not in backend.log("env-2")
    jobdir = Path(backend.root) / "jobs" / "env-2"
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert env["HOME"] == str(jobdir / "home")
    assert env["TMPDIR"] == "/tmp"  # the sandbox's private tmpfs
    assert env["LANG"] == "C.UTF-8"
    assert env["SWITCHYARD_TASK_KEY"] == "env-2"
    assert env["OMP_NUM_THREADS"] == "1"
    # No GPU allocated: set and empty, so the job sees no GPU (unset would show all of them).
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_cuda_visible_devices_shows_the_allocated_gpus(make):
    backend = make([NodeView("g1", cpus=8, memory_mib=65536, gpus=4)])
    for key, gpus in (("gpu-a", 1), ("gpu-b", 2)):
        backend.submit(
            request(key, ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES; sleep 30"], gpus=gpus)
        )
    for key in ("gpu-a", "gpu-b"):
        assert running(backend, key).state is JobState.RUNNING
    deadline_wait(backend, "gpu-b", lambda _: backend.log("gpu-b") != "")
    deadline_wait(backend, "gpu-a", lambda _: backend.log("gpu-a") != "")
    assert backend.log("gpu-a") == "0\n"
    assert backend.log("gpu-b") == "1,2\n"
    [node] = backend.nodes()
    assert node.free_gpus == (3,)
