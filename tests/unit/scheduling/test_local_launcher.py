"""The local backend's launcher: one resident process per root forks every supervisor.
Backends come from `make` (conftest.py).

Real launchers, real supervisors, real sandboxes (launcher.py says what it does and why).
"""

from __future__ import annotations

import logging
import marshal
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduling.backends.base import JobState
from scheduling.backends.local import SUPERVISOR_DIED, LocalBackend, launch, launcher
from scheduling.backends.local.shim import proc_start_time
from scheduling.engine.registry import close_backends, get_backend
from tests.conftest import in_ci
from tests.unit.scheduling.local_backend.helpers import (
    SMALL,
    alive,
    configured,
    finished,
    request,
    running,
    state_file,
)


def launcher_pid(root: str) -> int:
    pid, start = map(int, Path(launcher.pid_path(root)).read_text().split())
    assert proc_start_time(pid) == start
    return pid


def parent_of(pid: int) -> int:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return int(data[data.rfind(b")") + 2 :].split()[1])


def gone(pid: int, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def mentioning(text: str) -> list[int]:
    """Living processes whose command line contains `text`."""
    found = []
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() and alive(pid):
                found.append(pid)
        except OSError:
            continue  # gone meanwhile
    return found


def ask(root: str, payload: bytes) -> list[str]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(launcher.socket_path(root))
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data.decode().splitlines()


def test_jobs_of_every_backend_on_a_root_start_through_its_one_launcher(make):
    first, second = make(), make()  # two worker processes sharing the root
    first.submit(request("one-1", ["sleep", "30"]))
    second.submit(request("two-1", ["sleep", "30"]))
    running(first, "one-1")
    running(second, "two-1")
    pid = launcher_pid(first.root)
    for key in ("one-1", "two-1"):
        supervisor = state_file(first, key)["shim_pid"]
        assert parent_of(supervisor) == pid
        # A session of its own, as a directly spawned supervisor has.
        assert os.getsid(supervisor) == supervisor
    run = Path(launcher.run_dir(first.root))
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert stat.S_IMODE(Path(launcher.socket_path(first.root)).stat().st_mode) == 0o600
    assert not first._children and not second._children  # nothing spawned directly


def test_a_pass_that_starts_many_jobs_asks_the_launcher_in_parts(make, monkeypatch):
    monkeypatch.setattr(launch, "LAUNCHER_BATCH", 3)
    asked: list[int] = []
    real = launch._ask_launcher
    monkeypatch.setattr(
        launch,
        "_ask_launcher",
        lambda root, plans, python: asked.append(len(plans)) or real(root, plans, python),
    )
    backend = make()
    # Four fit the node's four cpus at once: one pass starts them all.
    results = backend.submit_many([request(f"part-{i}", ["true"]) for i in range(4)])
    assert [r.backend_id for r in results] == [f"part-{i}" for i in range(4)]
    assert asked == [3, 1]
    for i in range(4):
        assert finished(backend, f"part-{i}").state is JobState.SUCCEEDED


def test_a_supervisor_keeps_nothing_of_the_launcher(make):
    backend = make()
    backend.submit(request("bare-1", ["sleep", "30"]))
    running(backend, "bare-1")
    supervisor = state_file(backend, "bare-1")["shim_pid"]
    environ = Path(f"/proc/{supervisor}/environ").read_bytes().split(b"\0")
    assert sorted(e.split(b"=", 1)[0] for e in environ if e) == [b"LANG", b"PATH"]
    targets = [
        os.readlink(f"/proc/{supervisor}/fd/{fd}") for fd in os.listdir(f"/proc/{supervisor}/fd")
    ]
    assert not [t for t in targets if t.startswith("socket:")]  # not the launcher's socket
    assert not [t for t in targets if t.endswith("launcher.lock")]
    assert Path(f"/proc/{supervisor}/cwd").resolve() == Path(backend.root) / "jobs" / "bare-1"
    # Its plan came over the socket: none is left beside the job.
    assert not (Path(backend.root) / "jobs" / "bare-1" / "launch.marshal").exists()


def test_supervisors_outlive_their_launcher_and_a_new_one_takes_over(make):
    backend = make()
    backend.submit(request("long-1", ["sleep", "30"]))
    running(backend, "long-1")
    old = launcher_pid(backend.root)
    assert launch.stop_launcher(backend.root)
    assert gone(old)
    assert not Path(launcher.socket_path(backend.root)).exists()
    assert backend.poll(["long-1"])["long-1"].state is JobState.RUNNING

    backend.submit(request("next-1", ["true"]))
    assert finished(backend, "next-1").state is JobState.SUCCEEDED
    assert launcher_pid(backend.root) != old
    backend.cancel("long-1")
    assert finished(backend, "long-1").state is JobState.CANCELLED


def test_closing_the_backends_stops_the_launcher_and_closes_every_other_one(make, settings):
    # What `manage.py up` does when it stops: each configured backend's close().
    backend = make()
    settings.COMPUTE_BACKENDS = {
        **configured(backend),
        "fake": {"BACKEND": "scheduling.backends.fake.FakeBackend", "OPTIONS": {}},
    }
    backend.submit(request("kept-1", ["sleep", "30"]))
    running(backend, "kept-1")
    pid = launcher_pid(backend.root)
    close_backends()
    assert gone(pid)
    assert ("close", ()) in get_backend("fake").calls
    assert backend.poll(["kept-1"])["kept-1"].state is JobState.RUNNING  # the job goes on


def test_a_launcher_of_older_code_makes_way_for_the_new(make, tmp_path):
    backend = make()
    # An "old" launcher: the same code, from a copy whose files then change on disk.
    old_code = tmp_path / "old"
    old_code.mkdir()
    for name in launcher.CODE_FILES:
        (old_code / name).parent.mkdir(exist_ok=True)
        shutil.copy(Path(launch.SHIM_DIR) / name, old_code / name)
    subprocess.run(
        [sys.executable, "-I", "-S", str(old_code / "launcher.py"), backend.root], check=True
    )
    old = launcher_pid(backend.root)
    os.utime(old_code / "shim.py", ns=(time.time_ns(), time.time_ns() + 10**9))

    backend.submit(request("upgraded-1", ["true"]))
    assert finished(backend, "upgraded-1").state is JobState.SUCCEEDED
    assert gone(old)
    new = launcher_pid(backend.root)
    assert new != old
    assert str(old_code) not in Path(f"/proc/{new}/cmdline").read_text()


def test_the_launcher_refuses_what_is_not_a_job(make):
    backend = make()
    backend.submit(request("real-1", ["true"]))
    finished(backend, "real-1")
    plan = marshal.dumps({"argv": ["true"]})
    payload = launcher.request_bytes(
        {"../../etc": plan, "-x": plan, "NotAKey": plan, "no-such-job": plan, "real-1": b"junk"}
    )
    assert ask(backend.root, payload) == [
        "error not a job key",
        "error not a job key",
        "error not a job key",
        "error no such job",
        "error not a launch plan",
    ]
    assert ask(backend.root, b"real-1\n") == ["error not a launcher request"]
    assert ask(backend.root, b"real-1 99\nshort") == ["error a launch plan is cut short"]


@pytest.mark.skipif(os.geteuid() != 0 and not in_ci(), reason="needs root to act as another user")
def test_only_the_launchers_own_user_may_start_jobs(make):
    backend = make()
    backend.submit(request("mine-1", ["true"]))
    finished(backend, "mine-1")
    # Even with its folder opened up, another account's request is refused.
    run = Path(launcher.run_dir(backend.root))
    run.chmod(0o755)
    Path(launcher.socket_path(backend.root)).chmod(0o666)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the other account
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            payload = launcher.request_bytes({"mine-1": marshal.dumps({"argv": ["true"]})})
            os.write(write, "\n".join(ask(backend.root, payload)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        answer = f.read()
    os.waitpid(pid, 0)
    run.chmod(0o700)
    assert answer == "error only the launcher's own user may start jobs"


def test_without_a_launcher_supervisors_are_spawned_directly(make, tmp_path):
    # An interpreter that will not run the launcher: the backend falls back, and says so.
    python = tmp_path / "no-launcher-python"
    python.write_text(
        f'#!/bin/sh\ncase "$*" in *"import launcher"*) exit 3;; esac\nexec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    backend = make(python=str(python))
    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("scheduling.backends.local.launch")
    logger.addHandler(handler)
    try:
        backend.submit(request("direct-1", ["true"]))
    finally:
        logger.removeHandler(handler)
    assert finished(backend, "direct-1").state is JobState.SUCCEEDED
    assert [w for w in warnings if "spawning supervisors" in w]
    assert (Path(backend.root) / "jobs" / "direct-1" / "launch.marshal").exists()
    assert not Path(launcher.pid_path(backend.root)).exists()


def test_a_launcher_starts_nothing_for_a_backend_that_went_away(make):
    backend = make()
    backend.submit(request("first-1", ["true"]))  # a launcher now serves the root
    finished(backend, "first-1")
    jobdir = Path(backend.root) / "jobs" / "gone-1"
    (jobdir / "work").mkdir(parents=True)
    payload = launcher.request_bytes({"gone-1": marshal.dumps({"argv": ["true"]})})
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(launcher.socket_path(backend.root))
        conn.sendall(payload)  # and closes without waiting for the answer
    time.sleep(0.5)
    assert not (jobdir / "shim.pid").exists()
    assert launcher_pid(backend.root)  # still serving


def test_an_answer_that_does_not_come_starts_nothing_twice(make, monkeypatch):
    def lost(root, plans, python):
        raise launch.LauncherLost("timed out after the request was sent")

    monkeypatch.setattr(launch, "_ask_launcher", lost)
    backend = make()
    job = backend.submit(request("lost-1", ["true"]))
    # Not spawned directly: the launcher may have started it. The poll decides.
    assert job.state is JobState.PENDING and "starting" in job.reason
    jobdir = Path(backend.root) / "jobs" / "lost-1"
    assert not backend._children and not (jobdir / "launch.marshal").exists()
    job = finished(backend, "lost-1")
    assert job.state is JobState.FAILED and SUPERVISOR_DIED in job.reason


def test_a_launcher_leaves_when_idle_and_when_its_root_is_gone(job_root):
    root = str(job_root / "idle")
    os.makedirs(root)
    code = launch._RUN_LAUNCHER
    subprocess.run([sys.executable, "-I", "-S", "-c", code, root, "0.3"], check=True)
    assert gone(launcher_pid(root), timeout=5)
    assert not Path(launcher.socket_path(root)).exists()

    subprocess.run([sys.executable, "-I", "-S", "-c", code, root, "600"], check=True)
    pid = launcher_pid(root)
    os.unlink(launcher.socket_path(root))
    assert gone(pid, timeout=launcher.CHECK_S + 5)


def test_two_launchers_started_at_once_leave_one_serving(job_root):
    root = str(job_root / "race")
    os.makedirs(root)
    starts = [
        subprocess.Popen([sys.executable, "-I", "-S", "-c", launch._RUN_LAUNCHER, root])
        for _ in range(4)
    ]
    assert [p.wait(timeout=10) for p in starts] == [0, 0, 0, 0]
    pid = launcher_pid(root)
    assert mentioning(root) == [pid]
    launch.stop_launcher(root)


def test_a_root_deeper_than_a_socket_address_holds_still_starts_through_its_launcher(job_root):
    # A Unix socket's address holds 108 bytes; a deep var folder (a test's tmp path under a
    # parallel runner) makes the launcher's socket path longer than that.
    root = job_root / ("deep-folder-" * 9) / "root"
    root.parent.mkdir()
    root.parent.chmod(0o711)  # passable by the job's account, as the root must be
    assert len(launcher.socket_path(str(root))) > 108
    backend = LocalBackend("local-test", root=str(root), node_source=lambda alias: [SMALL])
    try:
        backend.submit(request("deep-1", ["true"]))
        assert finished(backend, "deep-1").state is JobState.SUCCEEDED
        assert not backend._children  # forked by the launcher, not spawned directly
        assert launcher_pid(str(root)) > 0
    finally:
        backend.close()
