"""The live sandbox's agent in a real bubblewrap sandbox, reached through the portal's client
(session/wire.py): the protocol of docs/sandboxes.md, and a client that treats every answer
as hostile."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduling.backends.base import BackendError, ExecRequest, SessionGone
from scheduling.backends.sandbox import sandbox_argv
from scheduling.backends.session import box, wire
from tests.unit.scheduling.local_backend.helpers import JOB_UID
from tests.unit.scheduling.sessions.helpers import wait_answers

AGENT = str(Path(box.__file__).with_name("agent.py"))


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start agents in sandboxes of their own, as the job account; their socket paths."""
    started: list[subprocess.Popen[bytes]] = []

    def _start(name: str = "a", idle_s: float = 60) -> str:
        path = str(tmp_path / f"{name}.sock")
        listener = box.listen(path)
        argv = sandbox_argv(
            "bwrap",
            writable=[],
            hide="/srv",
            chdir="/",
            tmp_bytes=64 << 20,
            max_processes=200,
            extra=box.mounts(AGENT, home_bytes=64 << 20),
        )
        fd = listener.fileno()
        process = subprocess.Popen(
            [*argv, *box.agent_argv(idle_s, listen_fd=fd, python="/usr/bin/python3")],
            pass_fds=[fd],
            user=JOB_UID if os.geteuid() == 0 else None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        listener.close()
        started.append(process)
        wait_answers(path, process)
        return path

    yield _start
    for process in started:
        process.kill()
        process.wait()


def run(path: str, *argv: str, **options) -> tuple[int | None, str, str]:
    result = wire.exec_in(path, ExecRequest(argv=argv, **options))
    return result.exit_code, result.stdout.decode(), result.stderr.decode()


def test_execs_build_on_each_others_files_in_the_sessions_home(start_agent):
    path = start_agent()
    assert run(path, "sh", "-c", "echo one > notes.txt") == (0, "", "")
    assert run(path, "sh", "-c", "echo two >> notes.txt; pwd") == (0, "/home/sandbox\n", "")
    wire.put_file(
        path, "bin/show.sh", b"#!/bin/sh\ncat notes.txt\necho err >&2\nexit 3\n", mode=0o755
    )
    assert run(path, "./bin/show.sh") == (3, "one\ntwo\n", "err\n")
    assert wire.get_file(path, "/home/sandbox/notes.txt", limit=100) == b"one\ntwo\n"


def test_cwd_env_stdin_and_a_command_that_is_not_there(start_agent):
    path = start_agent()
    run(path, "mkdir", "-p", "sub/dir")
    code, out, _ = run(
        path,
        "sh",
        "-c",
        'pwd; echo "$GREETING"; cat',
        cwd="sub/dir",
        env=(("GREETING", "hello"),),
        stdin=b"from stdin",
    )
    assert (code, out) == (0, "/home/sandbox/sub/dir\nhello\nfrom stdin")
    code, out, err = run(path, "no-such-command")
    assert code == 127 and "no-such-command" in err
    with pytest.raises(wire.AgentRefused, match="cwd"):
        run(path, "true", cwd="missing")


def test_a_command_past_its_timeout_is_killed_with_what_it_wrote(start_agent):
    path = start_agent()
    started = time.monotonic()
    result = wire.exec_in(
        path, ExecRequest(argv=("sh", "-c", "echo before; sleep 30"), timeout_s=0.5)
    )
    assert time.monotonic() - started < 5
    assert result.timed_out and result.exit_code is None and result.stdout == b"before\n"


def test_a_background_process_lives_on_between_execs(start_agent):
    path = start_agent()
    started = time.monotonic()
    code, _, _ = run(path, "sh", "-c", "(while true; do date +%s >> ticks; sleep 0.1; done) &")
    assert code == 0 and time.monotonic() - started < 2  # not waiting for the child
    time.sleep(0.5)
    first = run(path, "wc", "-l", "ticks")[1]
    time.sleep(0.5)
    assert int(run(path, "wc", "-l", "ticks")[1].split()[0]) > int(first.split()[0])
    # A background child that keeps writing to the exec's stdout does not die of it.
    run(path, "sh", "-c", "(sleep 0.3; echo late; touch wrote-late) &")
    time.sleep(0.8)
    assert run(path, "ls", "wrote-late")[0] == 0


def test_output_past_the_cap_is_cut_and_said_so(start_agent):
    path = start_agent()
    result = wire.exec_in(
        path, ExecRequest(argv=("head", "-c", "300000", "/dev/zero"), max_output=1000)
    )
    assert result.truncated and result.stdout == b"\0" * 1000 and result.exit_code == 0


def test_streamed_output_arrives_in_order_and_whole(start_agent):
    path = start_agent()
    chunks: list[tuple[str, bytes]] = []
    result = wire.exec_in(
        path,
        ExecRequest(argv=("sh", "-c", "echo a; sleep 0.2; echo b >&2; sleep 0.2; echo c")),
        on_output=lambda name, data: chunks.append((name, data)),
    )
    assert chunks == [("stdout", b"a\n"), ("stderr", b"b\n"), ("stdout", b"c\n")]
    assert result.stdout == b"a\nc\n" and result.stderr == b"b\n"


def test_binary_files_round_trip_and_the_limit_holds(start_agent):
    path = start_agent()
    data = bytes(range(256)) * 4096
    wire.put_file(path, "blob.bin", data)
    assert wire.get_file(path, "blob.bin", limit=len(data)) == data
    assert run(path, "sha256sum", "blob.bin")[1].split()[0] == hashlib.sha256(data).hexdigest()
    with pytest.raises(wire.AgentRefused, match="limit"):
        wire.get_file(path, "blob.bin", limit=len(data) - 1)
    with pytest.raises(wire.AgentRefused, match="No such file"):
        wire.get_file(path, "missing", limit=10)


def test_two_sandboxes_see_neither_the_others_files_nor_processes(start_agent):
    one, two = start_agent("one"), start_agent("two")
    run(one, "sh", "-c", "echo mine > secret; sleep 300 &")
    assert run(two, "ls", "secret")[0] != 0
    assert "sleep" not in run(two, "ps", "-eo", "comm")[1]
    assert "sleep" in run(one, "ps", "-eo", "comm")[1]


def test_the_agent_ends_itself_after_its_idle_backstop(start_agent):
    path = start_agent(idle_s=-29.5)  # idle + 30 s of grace: half a second
    time.sleep(2.5)  # asking would count as activity: wait, then ask once
    with pytest.raises(SessionGone):
        wire.ping(path)


def test_a_socket_that_is_gone_is_session_gone(tmp_path):
    with pytest.raises(SessionGone):
        wire.ping(str(tmp_path / "none.sock"))
    with pytest.raises(SessionGone):
        wire.ping(str(tmp_path / ("x" * 120) / "session.sock"))


@pytest.mark.parametrize(
    "answer",
    [
        struct.pack(">I", 1 << 30),  # a frame far over the cap
        struct.pack(">I", 5) + b"nope!",  # not JSON
        struct.pack(">I", 2) + b"[]",  # not an object
        struct.pack(">I", 4) + b'{"x"',  # cut short
        b"",  # hung up
    ],
)
def test_a_hostile_answer_is_a_backend_error(tmp_path, answer):
    path = str(tmp_path / "evil.sock")
    server = box.listen(path)

    def answer_once() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(answer)

    threading.Thread(target=answer_once, daemon=True).start()
    with pytest.raises(BackendError):
        wire.ping(path, timeout_s=2)
    server.close()


def test_an_answer_that_never_comes_is_a_backend_error_at_the_deadline(tmp_path):
    path = str(tmp_path / "slow.sock")
    server = box.listen(path)
    started = time.monotonic()
    with pytest.raises(BackendError, match="in time"):
        wire.ping(path, timeout_s=0.3)
    assert time.monotonic() - started < 2
    server.close()


def test_exec_output_over_the_callers_cap_is_refused(tmp_path):
    path = str(tmp_path / "big.sock")
    server = box.listen(path)
    big = b'{"exit_code":0,"stdout":"' + b"A" * 4000 + b'","stderr":"","duration_ms":1}'

    def answer_once() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(struct.pack(">I", len(big)) + big)

    threading.Thread(target=answer_once, daemon=True).start()
    with pytest.raises(BackendError, match="cap"):
        wire.exec_in(path, ExecRequest(argv=("true",), max_output=100))
    server.close()


def test_a_socket_appears_only_once_it_listens_and_replaces_a_stale_one(tmp_path):
    """box.listen binds under a passing name and renames: a client that finds the path is
    never refused for being early, so a refusal always means the agent has gone."""
    path = str(tmp_path / "s.sock")
    stale = box.listen(path)
    stale.close()
    with pytest.raises(ConnectionRefusedError):
        socket.socket(socket.AF_UNIX).connect(path)
    server = box.listen(path)
    assert sorted(os.listdir(tmp_path)) == ["s.sock"]  # nothing left under the passing name
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    client = socket.socket(socket.AF_UNIX)
    client.connect(path)
    client.close()
    server.close()
