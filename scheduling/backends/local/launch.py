"""Starting a local job: its launch plan, its supervisor, and the processes it leaves.

The plan is everything the supervisor (`shim.py`) needs to run the command: argv (with the
sandbox in front of it for agent/sandbox tasks), an environment built from nothing, the
working directory, the walltime. It is written as `launch.marshal` beside the job's state;
the supervisor is spawned detached, so it outlives the worker that started it.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

from scheduling.backends.base import SubmitRequest
from scheduling.backends.local.jobstore import JobStore
from scheduling.backends.local.shim import proc_start_time
from scheduling.backends.sandbox import sandbox_argv
from scheduling.decisions.types import Placement

SHIM_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.py")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Set by the backend from the allocation; a descriptor's env may not override them.
RESERVED_ENV = ("SWITCHYARD_TASK_KEY", "SWITCHYARD_NODES", "CUDA_VISIBLE_DEVICES")


def launch_plan(
    store: JobStore,
    key: str,
    request: SubmitRequest,
    placement: Placement,
    *,
    bwrap: str | None,
    grace_s: float,
) -> dict[str, Any]:
    """What the supervisor runs; `bwrap` is the sandbox's path, or None for no sandbox."""
    spec = request.spec
    jobdir = store.jobdir(key)
    work, home, tmp = (os.path.join(jobdir, d) for d in ("work", "home", "tmp"))
    if spec.command is not None:
        argv = list(spec.command)
    else:
        argv = ["/bin/bash", os.path.join(jobdir, "script.sh")]
    sandboxed = bwrap is not None
    # Built from nothing: the portal's own environment (and its secrets) never reaches
    # the job.
    env = {
        "PATH": SAFE_PATH,
        "HOME": home,
        "LANG": "C.UTF-8",
        # Inside the sandbox /tmp is a private tmpfs and the job dir is read-only.
        "TMPDIR": "/tmp" if sandboxed else tmp,
    }
    env.update((k, v) for k, v in spec.env if k not in RESERVED_ENV)
    first = placement.allocations[0] if placement.allocations else None
    env["SWITCHYARD_TASK_KEY"] = key
    env["SWITCHYARD_NODES"] = ",".join(placement.nodes)
    # Always set, empty when no GPU was allocated: unset would expose every GPU of the
    # machine to the job. The process runs "on" the first node of its allocation.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in (first.gpu_indices if first else ()))
    if sandboxed:
        argv = [
            *sandbox_argv(
                bwrap,
                writable=[work, home],  # HOME must be writable too
                readonly=[argv[1]] if spec.command is None else [],  # script.sh
                hide=store.root,
                chdir=work,
            ),
            *argv,
        ]
    return {
        "argv": argv,
        "env": env,
        "cwd": work,
        "mkdirs": [work, home, tmp],
        "walltime_s": spec.walltime_s,
        "grace_s": grace_s,
        "sandboxed": sandboxed,
        "bwrap": bwrap,
    }


def write_plan(store: JobStore, key: str, plan: dict[str, Any]) -> None:
    # marshal, not JSON: it is built into the interpreter, while importing json would cost
    # the supervisor ~30 ms of start-up here. Read it with marshal.load().
    with open(store.path(key, "launch.marshal"), "wb") as f:
        marshal.dump(plan, f, 4)


def spawn_supervisor(store: JobStore, key: str, python: str) -> subprocess.Popen[bytes]:
    """Start `python -I -S shim.py <jobdir>` detached; record its pid and start time."""
    jobdir = store.jobdir(key)
    child = subprocess.Popen(
        [python, "-I", "-S", SHIM_PATH, jobdir],
        cwd=jobdir,
        env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},  # never the portal's environment
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,  # survives the worker; not hit by its signals
    )
    with open(store.path(key, "shim.pid"), "w", encoding="ascii") as f:
        f.write(f"{child.pid} {proc_start_time(child.pid) or 0}")
    return child


def supervisor_alive(store: JobStore, key: str, state: Mapping[str, Any]) -> bool:
    pid, start = state.get("shim_pid"), state.get("shim_start")
    if pid is None:
        try:
            with open(store.path(key, "shim.pid"), encoding="ascii") as f:
                pid_s, start_s = f.read().split()
            pid, start = int(pid_s), int(start_s)
        except (OSError, ValueError):
            # "starting" without a supervisor, seen under the lock: whoever started it
            # died between writing the state and spawning.
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else: the start time decides
    # The start time guards against a reused pid (e.g. after a reboot).
    return proc_start_time(pid) == start


def signal_child(state: Mapping[str, Any], signo: int) -> None:
    """Signal the job's process group, and kill its sandbox, if they are still the job's."""
    pid, start = state.get("child_pid"), state.get("child_start")
    if pid is None or start is None or proc_start_time(pid) != start:
        return  # not started, or gone (a pid that may since belong to someone else)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(state.get("child_pgid", pid), signo)
    # A sandbox's processes live in their own session under bwrap's init: killing that
    # init ends the whole pid namespace (see shim.Shim.spawn for why we do this).
    box_pid, box_start = state.get("sandbox_pid"), state.get("sandbox_start")
    if box_pid and box_start is not None and proc_start_time(box_pid) == box_start:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(box_pid, signal.SIGKILL)
