"""A session's end leaves none of its processes, whatever they did to outlive it: double
forks, new sessions and process groups, a nested namespace, ignored signals, an exec that
timed out (docs/sandboxes.md: deleted, idle or its lifetime, "its processes all gone")."""

from __future__ import annotations

import os
import secrets
import time

from scheduling.backends.base import JobState
from tests.unit.scheduling.local_backend.helpers import finished, running
from tests.unit.scheduling.sessions.helpers import run, session


def marked(mark: str) -> list[int]:
    """Host pids whose command line carries `mark`, anywhere on the machine."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_nothing_a_session_started_outlives_its_cancel(make):
    backend = make()
    backend.submit(session("esc"))
    running(backend, "esc")
    mark = f"sy{secrets.token_hex(6)}"
    # Each leaves a `sleep` with the mark as its name (bash's `exec -a`).
    tricks = [
        f"bash -c 'exec -a {mark}-a sleep 600' &",
        f"( setsid bash -c 'bash -c \"exec -a {mark}-b sleep 600\" &' & ) ",
        f"nohup bash -c 'trap \"\" HUP TERM INT; exec -a {mark}-c sleep 600' >/dev/null 2>&1 &",
        f"unshare -Urpf bash -c 'exec -a {mark}-d sleep 600' >/dev/null 2>&1 &",
    ]
    for trick in tricks:
        code, _, err = run(backend, "esc", "sh", "-c", trick)
        assert code == 0, err
    # An exec past its timeout kills its own group; one it double-forked goes on.
    code, _, _ = run(
        backend,
        "esc",
        "sh",
        "-c",
        f"(setsid bash -c 'exec -a {mark}-e sleep 600' &); sleep 30",
        timeout_s=0.5,
    )
    assert code is None
    deadline = time.monotonic() + 5
    while len(marked(mark)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = marked(mark)
    assert len(alive) >= 4, "the tricks did not even start"
    backend.cancel("esc")
    assert finished(backend, "esc").state is JobState.CANCELLED
    deadline = time.monotonic() + 10
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marked(mark) == []
