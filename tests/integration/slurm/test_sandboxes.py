"""Live sandboxes on the real Slurm (scheduling/backends/slurm/session.py,
docs/sandbox-slurm.md): a session is a batch job running the agent; each exec is an
`srun --overlap` step whose relay reaches the agent's socket, as the job's account.

`.ci/run` starts the cluster; without it these tests fail in CI and skip elsewhere. One
session serves most checks (each start is a job start).
"""

from __future__ import annotations

import os
import pwd
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from scheduling.backends import SubmitRequest
from scheduling.backends.base import BackendError, ExecRequest, SessionGone
from scheduling.backends.slurm.session import session_folder
from scheduling.decisions.types import QueuePolicy
from scheduling.spec import Resources, TaskSpec
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

AGENTS = QueuePolicy(name="inference-agent", pool="inference-agent", task_types=("sandbox",))


def session_request(project: str = "sandboxes", **spec: Any) -> SubmitRequest:
    """A session's submit request; `spec` sets more of its TaskSpec (egress, image…)."""
    key = f"sbx-{uuid.uuid4().hex[:12]}"
    spec = TaskSpec(
        name=key,
        project=project,
        command=("true",),  # a session's command is the agent, whatever the spec says
        walltime_s=600,
        resources=Resources(cpus=1, memory_mib=256),
        session_idle_s=120,
        **spec,
    )
    return SubmitRequest(
        key=key, spec=spec, type="sandbox", queue=AGENTS, project=project, user="alice"
    )


def start_session(slurm, project: str = "sandboxes", **spec: Any) -> str:
    """Submit a session and wait until its agent answers; its backend id."""
    request = session_request(project, **spec)
    key = request.key
    backend_id = slurm.submit(request).backend_id

    def ready() -> bool:
        try:
            return bool(slurm.session_ping(backend_id, timeout_s=15))
        except SessionGone:
            raise
        except BackendError:
            return False  # its job waits for its node

    wait_for(ready, timeout=60, what=f"session {key} to answer", step=0.1)
    return backend_id


def run(slurm, backend_id: str, *argv: str, stdin: bytes = b""):
    return slurm.exec_in(backend_id, ExecRequest(argv=argv, stdin=stdin, timeout_s=30))


def processes_of(key: str) -> list[int]:
    """Host processes of the session `key`: its watcher, sandbox, agent and what its execs
    left running carry the key in their environment (the script exports it); its relays
    name its folder on their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if key.encode() in text:
            found.append(int(entry.name))
    return found


def wait_gone(slurm, backend_id: str) -> None:
    key = backend_id.partition(":")[2]
    wait_for(
        lambda: slurm.poll([backend_id])[backend_id].state.finished,
        timeout=60,
        what=f"{backend_id} to end",
    )
    wait_for(lambda: not processes_of(key), timeout=30, what=f"every process of {key} to end")


def test_a_session_keeps_its_files_and_processes_across_20_execs_and_cancel_ends_them_all(slurm):
    backend_id = start_session(slurm)
    key = backend_id.partition(":")[2]
    try:
        # Twenty execs, each building on what the one before left in the session's home.
        assert run(slurm, backend_id, "sh", "-c", "echo 0 > n").exit_code == 0
        for i in range(1, 19):
            step = f'n=$(cat n); test "$n" = {i - 1} && echo $((n + 1)) > n && echo {i} >> log'
            result = run(slurm, backend_id, "sh", "-c", step)
            assert (result.exit_code, result.stderr) == (0, b""), result
        last = run(slurm, backend_id, "sh", "-c", "cat n; wc -l < log; pwd")
        assert last.stdout.decode().split() == ["18", "18", "/home/sandbox"], last

        # As the job's account, never root, in its own sandbox: no portal file, no job folder.
        ids = run(slurm, backend_id, "id", "-u").stdout.decode().strip()
        assert ids == str(pwd.getpwnam(settings.SWITCHYARD_JOB_ACCOUNT).pw_uid)
        look = run(slurm, backend_id, "ls", str(settings.BASE_DIR), str(slurm.workdir / key))
        assert look.exit_code != 0 and b"No such file" in look.stderr, look
        folder = session_folder(slurm.session_dir, key)
        assert run(slurm, backend_id, "test", "-e", folder).exit_code == 1

        # stdin, exit codes, binary files both ways, streamed output as it comes.
        echoed = run(slurm, backend_id, "sh", "-c", "cat; exit 3", stdin=b"in\x00put")
        assert (echoed.exit_code, echoed.stdout) == (3, b"in\x00put")
        blob = bytes(range(256)) * 64
        slurm.put_file(backend_id, "data/blob.bin", blob, mode=0o600)
        assert slurm.get_file(backend_id, "data/blob.bin", limit=len(blob)) == blob
        with pytest.raises(BackendError, match="larger than the limit"):
            slurm.get_file(backend_id, "data/blob.bin", limit=10)
        seen: list[tuple[float, bytes]] = []
        request = ExecRequest(argv=("sh", "-c", "echo a; sleep 1; echo b"), timeout_s=30)
        streamed = slurm.exec_in(
            backend_id, request, on_output=lambda _, data: seen.append((time.monotonic(), data))
        )
        assert streamed.stdout == b"a\nb\n" and [d for _, d in seen] == [b"a\n", b"b\n"]
        assert seen[1][0] - seen[0][0] > 0.5, "the first line came only with the last"

        # A command past its timeout is killed by the agent; the relay brings the answer.
        late = slurm.exec_in(backend_id, ExecRequest(argv=("sleep", "30"), timeout_s=0.5))
        assert (late.timed_out, late.exit_code) == (True, None) and late.duration_ms < 5000

        # A process an exec leaves running goes on, in the session's own pid namespace.
        assert run(slurm, backend_id, "sh", "-c", "sleep 1000 >/dev/null 2>&1 &").exit_code == 0
        assert b"sleep 1000" in run(slurm, backend_id, "ps", "-eo", "args").stdout
        held = processes_of(key)
        assert len(held) >= 4, held  # watcher, bubblewrap (two), agent, sleep
    finally:
        slurm.cancel(backend_id)
    wait_gone(slurm, backend_id)
    assert not os.path.exists(folder)
    with pytest.raises(SessionGone):
        run(slurm, backend_id, "true")


def test_two_sessions_see_nothing_of_each_other(slurm):
    first = start_session(slurm)
    try:
        second = start_session(slurm)
        try:
            run(slurm, first, "sh", "-c", "echo secret > mine; sleep 1000 >/dev/null 2>&1 &")
            assert run(slurm, second, "ls", "-A").stdout == b""
            assert b"sleep 1000" not in run(slurm, second, "ps", "-eo", "args").stdout
            # Each backend id reaches its own session only.
            assert run(slurm, first, "cat", "mine").stdout == b"secret\n"
            assert run(slurm, second, "test", "-e", "mine").exit_code == 1
            # Neither sees the other's socket folder (its /tmp is its own).
            theirs = session_folder(slurm.session_dir, first.partition(":")[2])
            assert run(slurm, second, "test", "-e", theirs).exit_code == 1
        finally:
            slurm.cancel(second)
    finally:
        slurm.cancel(first)
    wait_gone(slurm, first)
    wait_gone(slurm, second)
