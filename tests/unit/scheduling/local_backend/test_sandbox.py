"""The local backend with real bubblewrap: what a task's sandbox lets it reach."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduling.backends.base import (
    JobState,
)
from scheduling.backends.local import BWRAP_MISSING
from tests.unit.scheduling.local_backend.helpers import (
    deadline_wait,
    finished,
    in_folder,
    request,
    running,
)

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
