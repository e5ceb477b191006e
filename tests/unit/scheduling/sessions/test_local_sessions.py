"""Live sandboxes on the local backend, with real bubblewrap and real processes: a session's
state carries over between execs and never to another session, and its end leaves nothing
running (docs/sandboxes.md)."""

from __future__ import annotations

import hashlib
import os
import stat
import time

import pytest

from scheduling.backends.base import BackendError, ExecRequest, JobState, SessionGone
from scheduling.backends.session import wire
from tests.unit.scheduling.local_backend.helpers import finished, request, running, state_file
from tests.unit.scheduling.sessions.helpers import in_namespace, pid_namespace, run, session


def test_twenty_execs_build_on_each_others_files(make):
    backend = make()
    backend.submit(session("build"))
    assert running(backend, "build").state is JobState.RUNNING
    steps = [
        ("sh", "-c", "echo 1 > count"),
        *[("sh", "-c", "echo $(( $(tail -n1 count) + 1 )) >> count") for _ in range(14)],
        ("sh", "-c", "printf '#!/bin/sh\\nwc -l < count\\n' > lines.sh && chmod +x lines.sh"),
        ("./lines.sh",),
        ("mkdir", "-p", "out"),
        ("sh", "-c", "./lines.sh > out/result && tail -n1 count >> out/result"),
        ("cat", "out/result"),
    ]
    results = [run(backend, "build", *argv) for argv in steps]
    assert len(results) == 20
    assert all(code == 0 for code, _, _ in results), results
    assert results[16][1] == "15\n"  # the script counts what the fifteen appends wrote
    assert results[-1][1] == "15\n15\n"
    assert backend.get_file("build", "out/result", limit=100) == b"15\n15\n"


def test_cwd_env_stdin_and_timeout_reach_the_command(make):
    backend = make()
    backend.submit(session("knobs"))
    running(backend, "knobs")
    run(backend, "knobs", "mkdir", "-p", "a/b")
    code, out, _ = run(
        backend,
        "knobs",
        "sh",
        "-c",
        'pwd; echo "$COLOUR"; cat',
        cwd="a/b",
        env=(("COLOUR", "teal"),),
        stdin=b"piped",
    )
    assert (code, out) == (0, "/home/sandbox/a/b\nteal\npiped")
    started = time.monotonic()
    result = backend.exec_in("knobs", ExecRequest(argv=("sleep", "30"), timeout_s=0.3))
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 5
    assert run(backend, "knobs", "true")[0] == 0  # the session goes on after a timeout


def test_a_background_process_survives_between_execs(make):
    backend = make()
    backend.submit(session("bg"))
    running(backend, "bg")
    run(backend, "bg", "sh", "-c", "(while true; do echo x >> ticks; sleep 0.05; done) &")
    time.sleep(0.3)
    first = int(run(backend, "bg", "wc", "-l", "ticks")[1].split()[0])
    time.sleep(0.3)
    assert int(run(backend, "bg", "wc", "-l", "ticks")[1].split()[0]) > first > 0


def test_two_sandboxes_see_neither_the_others_files_nor_processes(make):
    backend = make()
    backend.submit_many([session("left"), session("right")])
    running(backend, "left")
    running(backend, "right")
    run(backend, "left", "sh", "-c", "echo private > mine; sleep 600 &")
    assert run(backend, "right", "cat", "/home/sandbox/mine")[0] != 0
    # The background child execs `sleep` a moment after the exec answered: look until it has.
    deadline = time.monotonic() + 10
    while "sleep" not in run(backend, "left", "ps", "-eo", "comm")[1]:
        assert time.monotonic() < deadline, "the left sandbox's sleep never showed"
        time.sleep(0.05)
    assert "sleep" not in run(backend, "right", "ps", "-eo", "comm")[1]
    assert pid_namespace(backend, "left") != pid_namespace(backend, "right")


def test_output_past_the_cap_is_cut(make):
    backend = make()
    backend.submit(session("cap"))
    running(backend, "cap")
    result = backend.exec_in(
        "cap", ExecRequest(argv=("head", "-c", "5000000", "/dev/urandom"), max_output=4096)
    )
    assert result.truncated and len(result.stdout) == 4096 and result.exit_code == 0


def test_files_round_trip_binary_and_modes(make):
    backend = make()
    backend.submit(session("files"))
    running(backend, "files")
    data = bytes(range(256)) * 1000 + b"\0\xff"
    backend.put_file("files", "data/blob.bin", data)
    assert backend.get_file("files", "data/blob.bin", limit=len(data)) == data
    digest = run(backend, "files", "sha256sum", "data/blob.bin")[1].split()[0]
    assert digest == hashlib.sha256(data).hexdigest()
    backend.put_file("files", "tool.sh", b"#!/bin/sh\necho tool ran\n", mode=0o755)
    assert run(backend, "files", "./tool.sh") == (0, "tool ran\n", "")
    with pytest.raises(wire.AgentRefused, match="limit"):
        backend.get_file("files", "data/blob.bin", limit=10)


def test_cancel_ends_the_session_with_every_process_gone(make):
    backend = make()
    backend.submit(session("end"))
    running(backend, "end")
    run(backend, "end", "sh", "-c", "sleep 600 & sleep 600 &")
    namespace = pid_namespace(backend, "end")
    assert len(in_namespace(namespace)) >= 3  # the sandbox's init, the agent, the sleeps
    backend.cancel("end")
    assert finished(backend, "end").state is JobState.CANCELLED
    end = time.monotonic() + 5
    while in_namespace(namespace) and time.monotonic() < end:
        time.sleep(0.05)
    assert in_namespace(namespace) == []
    with pytest.raises(SessionGone):
        run(backend, "end", "true")


def test_the_walltime_is_the_sessions_lifetime(make):
    backend = make()
    backend.submit(session("short", walltime_s=1))
    running(backend, "short")
    assert run(backend, "short", "true")[0] == 0
    job = finished(backend, "short", timeout=15)
    assert job.state is JobState.TIMEOUT
    with pytest.raises(SessionGone):
        run(backend, "short", "true")


def test_the_agents_idle_backstop_ends_the_session(make):
    backend = make()
    # The agent ends itself after its idle time and 30 s more: -29 leaves one second.
    backend.submit(session("idle", idle_s=-29))
    running(backend, "idle")
    job = finished(backend, "idle", timeout=20)
    assert job.state is JobState.SUCCEEDED  # the agent ended on its own, not killed
    with pytest.raises(SessionGone):
        run(backend, "idle", "true")


def test_a_job_that_is_not_a_session_takes_no_exec(make):
    backend = make()
    backend.submit(request("batch", ["sleep", "30"]))
    running(backend, "batch")
    with pytest.raises(SessionGone, match="not a live sandbox"):
        run(backend, "batch", "true")
    with pytest.raises(SessionGone):
        run(backend, "no-such-key", "true")


def test_the_session_socket_is_the_portals_alone(make):
    backend = make()
    backend.submit(session("sock"))
    running(backend, "sock")
    path = backend._session_socket("sock")
    info = os.stat(path)
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    assert state_file(backend, "sock")["state"] == "running"


def test_usage_is_metered_from_start_to_end(make):
    backend = make()
    backend.submit(session("meter", cpus=2, memory_mib=512))
    running(backend, "meter")
    time.sleep(1.0)
    backend.cancel("meter")
    job = finished(backend, "meter")
    [run_] = backend.usage(["meter"])["meter"]
    assert run_.cpus == 2 and run_.memory_mib == 512
    assert job.started_at and job.ended_at
    assert abs(run_.elapsed_ms - (job.ended_at - job.started_at).total_seconds() * 1000) < 5
    assert run_.elapsed_ms >= 1000


def test_an_exec_before_the_sandbox_runs_is_refused_not_lost(make):
    backend = make()
    with pytest.raises(SessionGone):
        run(backend, "later", "true")
    backend.submit(session("later"))
    # Until its sandbox runs a call says so; once it runs the call is served. Never "gone".
    end = time.monotonic() + 10
    while True:
        try:
            assert run(backend, "later", "true")[0] == 0
            break
        except SessionGone:
            pytest.fail("a submitted session is not gone")
        except BackendError as exc:
            assert "not started" in str(exc)
            assert time.monotonic() < end


def test_the_home_is_a_tmpfs_of_the_memory_request_and_the_host_is_out_of_sight(make):
    backend = make()
    backend.submit(session("home", memory_mib=64))
    running(backend, "home")
    code, out, _ = run(backend, "home", "df", "-k", "/home/sandbox")
    assert code == 0 and out.splitlines()[1].split()[1] == str(64 * 1024)  # 1K blocks
    assert run(backend, "home", "ls", "-A", backend.root) == (0, "", "")  # jobs: hidden
    code, out, _ = run(backend, "home", "sh", "-c", "touch /usr/x; touch /tmp/x && echo tmp ok")
    assert out == "tmp ok\n"  # the system is read-only, its /tmp its own


def test_output_streams_to_the_caller_as_it_comes(make):
    backend = make()
    backend.submit(session("stream"))
    running(backend, "stream")
    seen: list[tuple[str, bytes, float]] = []
    result = backend.exec_in(
        "stream",
        ExecRequest(argv=("sh", "-c", "echo first; sleep 0.5; echo second >&2")),
        on_output=lambda name, data: seen.append((name, data, time.monotonic())),
    )
    assert [(name, data) for name, data, _ in seen] == [
        ("stdout", b"first\n"),
        ("stderr", b"second\n"),
    ]
    assert seen[1][2] - seen[0][2] > 0.3  # the first came before the command ended
    assert (result.stdout, result.stderr) == (b"first\n", b"second\n")
