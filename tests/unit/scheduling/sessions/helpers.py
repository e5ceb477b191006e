"""What the live-sandbox tests of the local backend share: a session's request, an exec that
returns (exit code, stdout, stderr), and the processes of a sandbox's pid namespace."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time

import pytest

from scheduling.backends.base import BackendError, ExecRequest, SubmitRequest
from scheduling.backends.local import LocalBackend
from scheduling.backends.session import wire
from tests.unit.scheduling.local_backend.helpers import request, state_file


def session(
    key: str, *, idle_s: int = 120, walltime_s: int = 600, cpus: int = 1, memory_mib: int = 256
) -> SubmitRequest:
    """A live sandbox's request, as the portal's sandbox service makes it: no command (the
    backend runs its agent), the session's idle time, its lifetime as the walltime."""
    base = request(
        key, None, type="sandbox", cpus=cpus, memory_mib=memory_mib, walltime_s=walltime_s
    )
    spec = dataclasses.replace(base.spec, session_idle_s=idle_s)
    return dataclasses.replace(base, spec=spec)


def run(backend: LocalBackend, key: str, *argv: str, **options) -> tuple[int | None, str, str]:
    result = backend.exec_in(key, ExecRequest(argv=argv, **options))
    return result.exit_code, result.stdout.decode(), result.stderr.decode()


def pid_namespace(backend: LocalBackend, key: str) -> str:
    """The pid namespace of the session's sandbox (its init's), as /proc names it."""
    state = state_file(backend, key)
    return os.readlink(f"/proc/{state['sandbox_pid']}/ns/pid")


def in_namespace(namespace: str) -> list[int]:
    """Host pids of every process in that pid namespace (zombies included)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == namespace:
                pids.append(int(pid))
        except OSError:
            continue
    return pids


def wait_answers(path: str, process: subprocess.Popen[bytes]) -> None:
    """Until the agent started as `process` answers a ping at `path` (10 s at most)."""
    end = time.monotonic() + 10
    while True:
        try:
            wire.ping(path)
            return
        except BackendError:
            if process.poll() is not None or time.monotonic() > end:
                err = process.stderr.read().decode() if process.stderr else ""
                pytest.fail(f"the agent did not answer (exit {process.poll()}): {err}")
            time.sleep(0.01)
