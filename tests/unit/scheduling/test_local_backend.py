"""The local backend with real processes and real bubblewrap: no mocks.

Every job here really runs. Waits poll with a deadline instead of fixed sleeps, and every
test's jobs are cancelled at teardown, so nothing outlives the test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduling.backends.base import (
    Backend,
    BackendError,
    Job,
    JobState,
    SubmitRequest,
    raw_length,
)
from scheduling.backends.local import BWRAP_MISSING, SUPERVISOR_DIED, LocalBackend
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


# -- idempotency and capacity -----------------------------------------------------------


def test_submit_twice_makes_one_job_and_one_process(make):
    first, second = make(), make()  # two worker processes sharing the root
    counter = Path(first.root) / "jobs" / "twice-1" / "work" / "count"
    req = request("twice-1", ["sh", "-c", "echo run >> count"])
    results: list[Job] = []
    threads = [
        threading.Thread(target=lambda b=b: results.append(b.submit(req)))
        for b in (first, second) * 4
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {j.backend_id for j in results} == {"twice-1"}
    assert finished(first, "twice-1").state is JobState.SUCCEEDED
    assert first.submit(req).state is JobState.SUCCEEDED  # still the same, finished job
    assert counter.read_text() == "run\n"
    assert first.find("twice-1") == second.find("twice-1")
    assert os.listdir(Path(first.root) / "jobs") == ["twice-1"]


def test_whole_node_jobs_wait_for_the_node_then_start_on_poll(make):
    backend = make([NodeView("n1", cpus=4, memory_mib=16384)])
    backend.submit(request("whole-a", ["sleep", "30"], queue=WHOLE))
    assert running(backend, "whole-a").state is JobState.RUNNING
    job = backend.submit(request("whole-b", ["true"], queue=WHOLE, cpus=1))
    assert job.state is JobState.PENDING
    assert "waiting for resources" in job.reason
    assert backend.poll(["whole-b"])["whole-b"].state is JobState.PENDING

    backend.cancel("whole-a")
    assert finished(backend, "whole-a").state is JobState.CANCELLED
    assert finished(backend, "whole-b").state is JobState.SUCCEEDED


def test_started_waits_for_placed_jobs_only_and_returns_once_they_started(make):
    backend = make([NodeView("n1", cpus=4, memory_mib=16384)])
    backend.submit(request("start-a", ["sleep", "30"], queue=WHOLE))
    backend.submit(request("start-b", ["true"], queue=WHOLE))  # waits for the node
    began = time.monotonic()
    found = backend.started(["start-a", "start-b", "no-such-job"], within_s=20)
    assert time.monotonic() - began < 10, "it returned when start-a started, not at the end"
    assert list(found) == ["start-a"] and found["start-a"].state is JobState.RUNNING
    assert backend.started(["start-b"], within_s=20) == {}  # pending: not waited for
    backend.cancel("start-a")
    assert finished(backend, "start-b").state is JobState.SUCCEEDED


def test_packing_respects_cpus_and_gpus(make):
    backend = make()  # 4 cpus, 2 GPUs
    for key in ("pack-a", "pack-b"):
        backend.submit(request(key, ["sleep", "30"], cpus=2, gpus=1))
        assert running(backend, key).state is JobState.RUNNING
    # GPUs are gone: a GPU job waits; and so does a CPU job (all 4 cpus are allocated).
    assert backend.submit(request("pack-gpu", ["true"], gpus=1)).state is JobState.PENDING
    assert backend.submit(request("pack-cpu", ["true"], cpus=1)).state is JobState.PENDING
    [node] = backend.nodes()
    assert (node.free_cpus, node.free_gpus) == (0, ())

    backend.cancel("pack-a")
    assert finished(backend, "pack-gpu").state is JobState.SUCCEEDED
    assert finished(backend, "pack-cpu").state is JobState.SUCCEEDED
    assert backend.poll(["pack-b"])["pack-b"].state is JobState.RUNNING


def test_a_jobs_placement_is_kept_in_its_state_and_an_older_alloc_file_still_counts(make):
    backend = make()  # 4 cpus, 2 GPUs
    backend.submit(request("placed-a", ["sleep", "30"], cpus=2, gpus=1))
    running(backend, "placed-a")
    jobdir = Path(backend.root) / "jobs" / "placed-a"
    assert not (jobdir / "alloc.json").exists()
    [allocation] = state_file(backend, "placed-a")["allocations"]
    assert (allocation["node"], allocation["cpus"], len(allocation["gpu_indices"])) == ("n1", 2, 1)

    # A job started by an older version: its placement in alloc.json, not in its state.
    path = jobdir / "state.json"
    state = json.loads(path.read_text())
    (jobdir / "alloc.json").write_text(json.dumps({"allocations": state.pop("allocations")}))
    path.write_text(json.dumps(state))
    fresh = make()  # another process: nothing cached
    [node] = fresh.nodes()
    assert (node.free_cpus, len(node.free_gpus)) == (2, 1)
    backend.cancel("placed-a")


def test_a_stored_job_is_pending_from_its_request_alone(make):
    backend = make()
    store = backend.store
    with store.locked():
        assert store.create(dataclasses.replace(request("stored-1", ["true"]), priority=7))
    jobdir = Path(backend.root) / "jobs" / "stored-1"
    assert sorted(p.name for p in jobdir.iterdir()) == ["request.json"]  # one file
    state = store.read_state("stored-1")
    assert (state["state"], state["seq"]) == ("pending", 1) and state["submitted_at"]
    assert backend.find("stored-1").state is JobState.PENDING
    assert store.priority("stored-1") == 7  # the request's, until set_priority
    backend.set_priority("stored-1", 9)
    assert store.priority("stored-1") == 9
    assert finished(backend, "stored-1").state is JobState.SUCCEEDED  # the next pass runs it


def test_jobs_are_numbered_in_submission_order_after_an_older_counter(make):
    backend = make()
    (Path(backend.root) / "seq").write_text("41")  # as an older version wrote it
    for key in ("order-a", "order-b"):
        backend.submit(request(key, ["true"]))
    assert [state_file(backend, k)["seq"] for k in ("order-a", "order-b")] == [42, 43]
    assert (Path(backend.root) / "seq").read_text() == "00000000000000000043"


def test_cpu_oversubscription_of_the_queue_is_honoured(make):
    agents = QueuePolicy(name="agents", pool="p", task_types=(), cpu_oversubscription=4)
    backend = make([NodeView("n1", cpus=1, memory_mib=16384)])
    for i in range(4):
        backend.submit(request(f"over-{i}", ["sleep", "30"], queue=agents))
    for i in range(4):
        assert running(backend, f"over-{i}").state is JobState.RUNNING
    assert backend.submit(request("over-4", ["true"], queue=agents)).state is JobState.PENDING


def test_a_blocked_job_does_not_block_smaller_later_ones(make):
    backend = make()
    backend.submit(request("fifo-a", ["sleep", "30"], cpus=3))
    assert running(backend, "fifo-a").state is JobState.RUNNING
    assert backend.submit(request("fifo-big", ["true"], cpus=2)).state is JobState.PENDING
    backend.submit(request("fifo-small", ["true"], cpus=1))
    assert finished(backend, "fifo-small").state is JobState.SUCCEEDED
    assert backend.poll(["fifo-big"])["fifo-big"].state is JobState.PENDING


def test_higher_priority_starts_first(make):
    backend = make([NodeView("n1", cpus=4, memory_mib=16384)])
    backend.submit(request("prio-a", ["sleep", "30"], queue=WHOLE))
    assert running(backend, "prio-a").state is JobState.RUNNING
    backend.submit(request("prio-b", ["sleep", "30"], queue=WHOLE))
    backend.submit(request("prio-c", ["sleep", "30"], queue=WHOLE))
    backend.set_priority("prio-c", 10)
    backend.cancel("prio-a")
    assert running(backend, "prio-c").state is JobState.RUNNING
    assert backend.poll(["prio-b"])["prio-b"].state is JobState.PENDING


def test_a_request_that_can_never_fit_fails_at_once(make):
    backend = make()
    job = backend.submit(request("huge-1", ["true"], cpus=64))
    assert job.state is JobState.FAILED
    assert "can ever hold" in job.reason and "cpus=64" in job.reason


def test_concurrent_workers_never_double_book(make):
    backends = [make([NodeView("n1", cpus=4, memory_mib=16384)]) for _ in range(3)]
    threads = [
        threading.Thread(
            target=lambda i=i: backends[i % 3].submit(
                request(f"race-{i}", ["sleep", "30"], queue=WHOLE)
            )
        )
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    keys = [f"race-{i}" for i in range(6)]
    states = [j.state for j in backends[0].poll(keys).values()]
    assert states.count(JobState.PENDING) >= 5
    started = [k for k in keys if state_file(backends[0], k)["state"] in ("starting", "running")]
    assert len(started) == 1


def test_drain_and_resume(make):
    backend = make()
    backend.drain("n1", "fan failure")
    assert [n.available for n in backend.nodes()] == [False]
    job = backend.submit(request("drained-1", ["true"]))
    assert job.state is JobState.PENDING
    assert "drained" in job.reason
    backend.resume("n1")
    assert [n.available for n in backend.nodes()] == [True]
    assert finished(backend, "drained-1").state is JobState.SUCCEEDED


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


# -- the sandbox --------------------------------------------------------------------------


@pytest.fixture
def tcp_port() -> Iterator[int]:
    """A TCP server in the test's own network namespace."""
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def connect_command(port: int) -> list[str]:
    code = (
        "import socket; "
        f"socket.create_connection(('127.0.0.1', {port}), timeout=2); "
        "print('CONNECTED')"
    )
    # The system's Python: the sandbox shows only the system, not this project's venv.
    return ["/usr/bin/python3", "-c", code]


def test_no_task_reaches_a_service_on_the_hosts_loopback(make, tcp_port):
    backend = make()
    backend.submit(request("net-hpc", connect_command(tcp_port)))
    backend.submit(request("net-box", connect_command(tcp_port), type="sandbox"))
    backend.submit(request("net-agent", connect_command(tcp_port), type="agent"))
    # The same command outside the sandbox connects: the test can tell the difference.
    outside = subprocess.run(connect_command(tcp_port), capture_output=True, text=True)
    assert outside.stdout == "CONNECTED\n"
    # A batch job has a network of its own (test_isolation.py tries it), not the host's.
    for key in ("net-hpc", "net-box", "net-agent"):
        job = finished(backend, key)
        assert job.state is JobState.FAILED, backend.log(key)
        assert "CONNECTED" not in backend.log(key)
        assert "Error" in backend.log(key)  # ConnectionRefusedError / OSError


def test_no_task_can_see_the_portals_files(make):
    backend = make()
    portal_file = Path(__file__).resolve()
    script = f"cat {portal_file} >/dev/null 2>&1 && echo LEAKED; ls /root >/dev/null 2>&1 && echo ROOT; echo done\n"
    backend.submit(request("peek-box", script=script, type="sandbox"))
    backend.submit(request("peek-hpc", script=script))
    for key in ("peek-box", "peek-hpc"):
        assert finished(backend, key).state is JobState.SUCCEEDED
        assert backend.log(key) == "done\n"
    # The same script outside the sandbox does see them: the check can fail.
    outside = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert "LEAKED" in outside.stdout


def test_a_sandbox_task_sees_a_read_only_system_and_a_private_tmp(make):
    backend = make()
    probes = ["/usr/switchyard-sandbox-probe", "/etc/switchyard-sandbox-probe"]
    jobdir = Path(backend.root) / "jobs" / "ro-1"
    # The job dir outside work/ and home/ is hidden behind a private tmpfs, read-only: a
    # write there fails and does not reach the real job dir.
    escaped = jobdir / "escaped.txt"
    script = "".join(f"touch {p} 2>/dev/null && echo WROTE {p}\n" for p in probes) + (
        f"(echo x > {escaped}) 2>/dev/null && echo ESCAPED\n"
        "echo ok > in-work.txt && echo ok > $HOME/in-home.txt && echo ok > /tmp/t && echo W\n"
    )
    backend.submit(request("ro-1", script=script, type="sandbox"))
    assert finished(backend, "ro-1").state is JobState.SUCCEEDED
    assert backend.log("ro-1") == "W\n"
    assert not any(os.path.exists(p) for p in probes)
    assert not escaped.exists()
    assert (jobdir / "work" / "in-work.txt").read_text() == "ok\n"
    assert (jobdir / "home" / "in-home.txt").read_text() == "ok\n"


def test_a_sandbox_task_cannot_read_other_jobs(make):
    backend = make()
    backend.submit(request("secret-1", ["sh", "-c", "echo TOPSECRET"]))
    assert finished(backend, "secret-1").state is JobState.SUCCEEDED
    other = Path(backend.root) / "jobs" / "secret-1"
    backend.submit(
        request("peek-1", ["sh", "-c", f"ls {other}; cat {other}/output.log"], type="agent")
    )
    job = finished(backend, "peek-1")
    assert job.state is JobState.FAILED
    assert "TOPSECRET" not in backend.log("peek-1")


def test_a_sandbox_task_is_killed_with_its_whole_sandbox_on_cancel(make, tmp_path):
    backend = make()
    backend.submit(request("box-cancel", ["bash", "-c", "sleep 300 & sleep 300"], type="agent"))
    assert running(backend, "box-cancel").state is JobState.RUNNING
    backend.cancel("box-cancel")
    assert finished(backend, "box-cancel").state is JobState.CANCELLED
    # Nothing of it is left: no process has the job's work dir as its cwd.
    work = str(Path(backend.root) / "jobs" / "box-cancel" / "work")
    deadline_wait(backend, "box-cancel", lambda _: not in_folder(work))


def test_without_bwrap_no_task_runs_unsandboxed(make, tmp_path):
    backend = make(bwrap="/nonexistent/bwrap")
    marker = tmp_path / "ran-unsandboxed"
    for key, type in (("nobwrap-1", "agent"), ("nobwrap-hpc", "hpc-simulation")):
        backend.submit(request(key, ["touch", str(marker)], type=type))
        job = finished(backend, key)
        assert (job.state, job.reason) == (JobState.FAILED, BWRAP_MISSING)
    assert not marker.exists()


def test_a_lease_lends_nodes_to_another_pool_for_work_that_ends_in_time(job_root):
    from scheduling.backends.base import LeaseView

    train = QueuePolicy(name="training", pool="train", task_types=())
    inventory = {
        "inf": [NodeView(name="g1", cpus=4, memory_mib=16384, gpus=2)],
        "train": [NodeView(name="t1", cpus=4, memory_mib=16384, gpus=2, available=False)],
    }
    backend = LocalBackend(
        "local-lease",
        root=str(job_root / "lease"),
        node_source=lambda alias: inventory,
        kill_grace_s=0.5,
    )
    lease = LeaseView(7, ("g1",), ("inference",), "training", "train", time.time() + 3600)
    before = backend.submit(request("before", ["true"], queue=train, gpus=2, walltime_s=60))
    assert before.state is JobState.PENDING  # the training pool's one node is down

    backend.apply_lease(lease, now=time.time())
    assert finished(backend, "before").state is JobState.SUCCEEDED
    assert state_file(backend, "before")["nodes"] == ["g1"]
    long = backend.submit(request("long", ["true"], queue=train, gpus=2, walltime_s=2 * 3600))
    assert long.state is JobState.PENDING  # its walltime outlasts the lease

    backend.end_lease(lease)
    after = backend.submit(request("after", ["true"], queue=train, gpus=2, walltime_s=60))
    assert after.state is JobState.PENDING  # the node is back in its pool
    own = backend.submit(request("own", ["true"], queue=PACK_INF, walltime_s=60))
    assert finished(backend, own.backend_id).state is JobState.SUCCEEDED
    for key in ("long", "after"):
        backend.cancel(key)


PACK_INF = QueuePolicy(name="inference", pool="inf", task_types=())


def test_multi_node_work_says_when_it_could_not_stay_under_one_switch(make):
    whole = QueuePolicy(name="training", pool="p", task_types=(), allocation="whole-node")
    backend = make(
        [
            NodeView(name="a1", cpus=2, memory_mib=4096, switch="sw1"),
            NodeView(name="b1", cpus=2, memory_mib=4096, switch="sw2"),
        ]
    )
    req = request("spread", ["sleep", "5"], queue=whole, cpus=4)
    req = SubmitRequest(
        **{
            **{f: getattr(req, f) for f in req.__dataclass_fields__},
            "spec": TaskSpec(
                name="spread",
                project="materials",
                resources=Resources(cpus=4, nodes=2),
                command=("sleep", "5"),
            ),
        }
    )
    job = running(backend, backend.submit(req).backend_id)
    assert set(job.nodes) == {"a1", "b1"}
    assert job.reason == "placed across 2 switches: no switch has 2 free nodes for it"
    backend.cancel("spread")


def test_a_log_chunk_never_cuts_a_character():
    from scheduling.backends.base import decode_log

    text = "héllo wörld € 🚀".encode()
    for end in range(len(text) + 1):
        shown = decode_log(text[:end])
        assert "\ufffd" not in shown and text.startswith(shown.encode())
    assert decode_log(b"ab\xffcd") == "ab\ufffdcd"  # invalid bytes inside are replaced


def test_many_jobs_are_placed_in_one_scheduling_pass(make, monkeypatch):
    backend = make()
    passes = []
    real = backend._schedule_locked
    monkeypatch.setattr(backend, "_schedule_locked", lambda **kw: passes.append(1) or real(**kw))
    already = backend.submit(request("many-0", ["true"]))
    passes.clear()
    bad = request("many-bad", ["true"])
    bad = dataclasses.replace(bad, key="Not A Key")
    results = backend.submit_many([request(f"many-{i}", ["true"]) for i in range(4)] + [bad])
    assert passes == [1]  # one pass for the four new jobs
    assert results[0].backend_id == already.backend_id == "many-0"  # found, not made again
    assert [r.backend_id for r in results[1:4]] == ["many-1", "many-2", "many-3"]
    assert isinstance(results[4], BackendError) and "key" in str(results[4])
    for i in range(4):
        assert finished(backend, f"many-{i}").state is JobState.SUCCEEDED
