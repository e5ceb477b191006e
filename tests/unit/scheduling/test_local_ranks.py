"""A multi-node job on the local backend: one process per node it holds, real processes in
the real sandbox, a real TCP rendezvous between them (scheduling/backends/local/ranks.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from scheduling.backends.base import JobState, SubmitRequest
from scheduling.backends.local import LocalBackend
from scheduling.backends.local.ranks import RANK_RUNNER
from scheduling.decisions.types import NodeView
from tests.unit.scheduling.local_backend.helpers import (
    alive,
    deadline_wait,
    finished,
    in_folder,
    request,
)

NODES = [
    NodeView(name="n1", cpus=4, memory_mib=4096, gpus=2),
    NodeView(name="n2", cpus=4, memory_mib=4096, gpus=2),
]

# Rank 0 listens on MASTER_ADDR:MASTER_PORT, every other rank connects to it; they trade a
# line each way. The system's Python: the sandbox shows only the system.
RENDEZVOUS = r"""
import os, socket, time
e = os.environ
rank, size = int(e["RANK"]), int(e["WORLD_SIZE"])
print("env", *(f"{k}={e[k]}" for k in (
    "SWITCHYARD_NODE_RANK", "SWITCHYARD_NUM_NODES", "SWITCHYARD_NODES", "RANK", "NODE_RANK",
    "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PET_NNODES", "PET_NODE_RANK",
    "CUDA_VISIBLE_DEVICES")), flush=True)
address = (e["MASTER_ADDR"], int(e["MASTER_PORT"]))
if rank == 0:
    server = socket.create_server(address)
    server.settimeout(20)
    for _ in range(size - 1):
        conn, _ = server.accept()
        heard = conn.makefile().readline().strip()
        conn.sendall(b"welcome from rank 0\n")
        print("rank 0 heard:", heard, flush=True)
else:
    end = time.monotonic() + 20
    while True:
        try:
            conn = socket.create_connection(address, timeout=2)
            break
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)
    conn.sendall(f"hello from rank {rank}\n".encode())
    print(f"rank {rank} heard:", conn.makefile().readline().strip(), flush=True)
"""


def nodes_request(key: str, command: list[str], *, nodes: int = 2, **fields) -> SubmitRequest:
    """`request()` for a job that asks for `nodes` nodes, a CPU and a GPU on each."""
    base = request(key, command, cpus=nodes, gpus=nodes, **fields)
    resources = dataclasses.replace(base.spec.resources, nodes=nodes)
    return dataclasses.replace(base, spec=dataclasses.replace(base.spec, resources=resources))


def rank_lines(log: str, rank: int) -> list[str]:
    return [
        line.removeprefix(f"[rank {rank}] ")
        for line in log.splitlines()
        if line.startswith(f"[rank {rank}] ")
    ]


def env_of(log: str, rank: int) -> dict[str, str]:
    line = next(line for line in rank_lines(log, rank) if line.startswith("env "))
    return dict(item.split("=", 1) for item in line.split()[1:])


@pytest.fixture
def backend(make) -> LocalBackend:
    return make(NODES)


@pytest.mark.parametrize("type", ["hpc-simulation", "agent"])
def test_a_two_node_job_runs_a_rank_per_node_and_they_rendezvous_over_tcp(backend, type):
    """Batch jobs (their network through slirp4netns) and agents (no network at all) alike:
    the ranks share the sandbox's own loopback."""
    backend.submit(nodes_request("two", ["/usr/bin/python3", "-c", RENDEZVOUS], type=type))
    job = finished(backend, "two", timeout=30)
    log = backend.log("two")
    assert job.state is JobState.SUCCEEDED, (job.reason, log)
    assert "rank 0 heard: hello from rank 1" in rank_lines(log, 0), log
    assert "rank 1 heard: welcome from rank 0" in rank_lines(log, 1), log
    first, second = env_of(log, 0), env_of(log, 1)
    shared = {
        "SWITCHYARD_NUM_NODES": "2",
        "SWITCHYARD_NODES": "n1,n2",
        "WORLD_SIZE": "2",
        "PET_NNODES": "2",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    for rank, env in enumerate((first, second)):
        assert env | shared == env, env
        for name in ("SWITCHYARD_NODE_RANK", "RANK", "NODE_RANK", "PET_NODE_RANK"):
            assert env[name] == str(rank), env
    # Each rank sees the GPU of its own node's allocation.
    assert re.fullmatch(r"\d", first["CUDA_VISIBLE_DEVICES"]), first
    assert re.fullmatch(r"\d", second["CUDA_VISIBLE_DEVICES"]), second


def test_a_failing_rank_fails_the_job_and_stops_the_others(backend):
    script = (
        'if [ "$RANK" = 1 ]; then sleep 0.5; echo giving up; exit 3; fi\n'
        "trap 'echo rank 0 stopped; exit 143' TERM\n"
        "echo rank 0 waits\n"
        "sleep 300 & wait\n"
    )
    backend.submit(nodes_request("fails", ["bash", "-c", script]))
    job = finished(backend, "fails", timeout=15)
    log = backend.log("fails")
    assert job.state is JobState.FAILED, (job.reason, log)
    assert job.reason == "rank 1 of 2 failed (exit code 3): the other ranks were stopped"
    assert job.exit_code == 3
    assert rank_lines(log, 1) == ["giving up"], log
    assert rank_lines(log, 0) == ["rank 0 waits", "rank 0 stopped"], log
    # Nothing of the job is left: rank 0's sleep went with its process group.
    work = str(Path(backend.root) / "jobs" / "fails" / "work")
    deadline_wait(backend, "fails", lambda _: not in_folder(work))


def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace(backend):
    script = 'if [ "$RANK" = 1 ]; then exit 5; fi\ntrap "" TERM\nsleep 300\n'
    request = nodes_request("stubborn", ["bash", "-c", script], extra={"kill_grace_s": "0.3"})
    backend.submit(request)
    job = finished(backend, "stubborn", timeout=10)
    assert (job.state, job.exit_code) == (JobState.FAILED, 5), backend.log("stubborn")
    assert job.reason.startswith("rank 1 of 2 failed (exit code 5)")


@pytest.mark.parametrize("how", ["cancel", "walltime"])
def test_cancel_and_walltime_stop_every_rank(backend, how):
    script = 'echo "rank $RANK runs"; sleep 300 & wait'
    walltime = 2 if how == "walltime" else None
    backend.submit(nodes_request("stop", ["bash", "-c", script], walltime_s=walltime))
    work = str(Path(backend.root) / "jobs" / "stop" / "work")
    # Both ranks and their sleeps run, in the job's work folder.
    deadline_wait(backend, "stop", lambda _: len(in_folder(work)) >= 4, timeout=10)
    pids = in_folder(work)
    # Their first lines are in the job's log (a stop may end the readers that prefix them).
    both = ("[rank 0] rank 0 runs", "[rank 1] rank 1 runs")
    deadline_wait(backend, "stop", lambda _: all(line in backend.log("stop") for line in both))
    if how == "cancel":
        backend.cancel("stop")
    job = finished(backend, "stop", timeout=10)
    expected = JobState.CANCELLED if how == "cancel" else JobState.TIMEOUT
    assert job.state is expected, (job.reason, backend.log("stop"))
    deadline_wait(backend, "stop", lambda _: not any(alive(pid) for pid in pids))
    # Ended by the signal: SIGTERM, or SIGKILL where the sandbox's own process took the
    # SIGTERM first and its namespace's end killed the ranks (either way none is left).
    assert job.exit_code in (128 + signal.SIGTERM, 128 + signal.SIGKILL)


def test_a_one_node_job_is_rank_0_of_1_and_keeps_its_own_master_port(backend):
    env = {"MASTER_PORT": "31000", "RANK": "7", "WORLD_SIZE": "9"}
    command = [
        "bash",
        "-c",
        "echo $RANK/$WORLD_SIZE/$SWITCHYARD_NUM_NODES $MASTER_ADDR:$MASTER_PORT",
    ]
    backend.submit(request("one", command, env=env))
    job = finished(backend, "one")
    assert job.state is JobState.SUCCEEDED, job.reason
    # One process, unprefixed; the rank is the backend's, the port the descriptor's.
    assert backend.log("one") == "0/1/1 127.0.0.1:31000\n"


def test_a_rank_still_starting_when_another_fails_is_stopped_too(tmp_path):
    """Rank 1 fails while rank 0 is not yet in a process group of its own (its `setsid` is
    slow, as on a loaded machine): the stop reaches it by its pid, and the job ends."""
    real = shutil.which("setsid")
    shim = tmp_path / "setsid"
    shim.write_text(f'#!/bin/bash\n[ "$RANK" = 0 ] && sleep 1\nexec {real} "$@"\n')
    shim.chmod(0o755)
    script = 'if [ "$RANK" = 1 ]; then exit 5; fi\ntrap "" TERM\nsleep 300\n'
    argv = ["bash", "-c", RANK_RUNNER, "runner", "0.3", "", "", "--", "bash", "-c", script]
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    runner = subprocess.Popen(
        argv, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, err = runner.communicate(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
    assert runner.returncode == 5, err
    assert "rank 1 of 2 failed (exit code 5): the other ranks were stopped" in err
