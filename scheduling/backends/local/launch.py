"""Starting a local job: its launch plan and its supervisor (its account: accounts.py).

The plan is everything the supervisor (`shim.py`) needs to run the command: argv (the
sandbox in front of the command, for every type of task), an environment built from
nothing, the working directory, the account (never root), the walltime and the limits. It is
sent to the root's launcher (`launcher.py`, one resident process), which forks the
supervisor with it; or else written as `launch.marshal` beside the job, and the supervisor
spawned as an interpreter of its own. Either way the supervisor has a session of its own,
so it outlives the worker that started it.
docs/security.md says what a job can see and do.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scheduling.backends import storage
from scheduling.backends.base import BackendError, SubmitRequest
from scheduling.backends.devices import bwrap_args, device_minor, missing_reason
from scheduling.backends.images import CachedImage
from scheduling.backends.local import sessionplan
from scheduling.backends.local.images import (
    BUSYBOX,
    busybox_limits,
    host_busybox,
    in_image,
    rootfs_binds,
)
from scheduling.backends.local.jobstore import KEY_RE, JobStore
from scheduling.backends.local.launcher import MAX_REQUEST_BYTES, at_path
from scheduling.backends.local.launcher import pid_path as launcher_pid_path
from scheduling.backends.local.launcher import request_bytes as launcher_request
from scheduling.backends.local.launcher import socket_path as launcher_socket_path
from scheduling.backends.local.limits import JobLimits
from scheduling.backends.local.ranks import RANK_ENV, rank_argv, rank_env
from scheduling.backends.local.shim import proc_start_time
from scheduling.backends.sandbox import TMPFS, sandbox_argv
from scheduling.decisions.devices import job_devices
from scheduling.decisions.types import Placement

log = logging.getLogger(__name__)

SHIM_DIR = os.path.dirname(os.path.abspath(__file__))
# The supervisor is imported, not run as a script: a script is compiled at every start (3 ms
# of a job's start-up here), a module comes from its cached bytecode. `-I` keeps the
# environment, the user's site and the working directory off sys.path.
_RUN_SHIM = (
    f"import sys; sys.path.insert(0, {SHIM_DIR!r}); import shim; sys.exit(shim.main(sys.argv))"
)
_RUN_LAUNCHER = (
    f"import sys; sys.path.insert(0, {SHIM_DIR!r}); import launcher; "
    "sys.exit(launcher.main(sys.argv))"
)
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
LAUNCHER_TIMEOUT_S = 10.0
# How the launcher and a directly spawned supervisor are started: never with the portal's
# environment or descriptors, in a session of their own (they outlive the worker and are
# not hit by its signals).
SITE_ENV = {"PATH": SAFE_PATH, "LANG": "C.UTF-8"}
_DETACHED: dict[str, Any] = {
    "env": SITE_ENV,
    "stdin": subprocess.DEVNULL,
    "stdout": subprocess.DEVNULL,
    "stderr": subprocess.DEVNULL,
    "close_fds": True,
    "start_new_session": True,
}
LAUNCHER_BATCH = 100  # jobs a request at most, and within the launcher's MAX_REQUEST_BYTES
# Set by the backend from the allocation; a descriptor's env may not override them.
RESERVED_ENV = ("SWITCHYARD_TASK_KEY", "SWITCHYARD_NODES", "CUDA_VISIBLE_DEVICES", *RANK_ENV)
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def validate(request: SubmitRequest) -> None:
    """Refuse what cannot be run safely; the descriptor parser should have caught it."""
    if not KEY_RE.match(request.key):
        raise BackendError(f"key: must match [a-z0-9][a-z0-9-]*, got {request.key!r}")
    spec = request.spec
    if spec.command is not None and spec.script is not None:
        raise BackendError("exactly one of command and script is required")
    if spec.command is None and spec.script is None and not spec.image_digest:
        if spec.session_idle_s is not None:
            return  # a live sandbox runs its agent (sessionplan.py)
        raise BackendError("a command or a script is required without an image")
    if spec.command is not None and (not spec.command or any("\0" in a for a in spec.command)):
        raise BackendError("command: must be a non-empty list of strings without NUL")
    if spec.script is not None and "\0" in spec.script:
        raise BackendError("script: must not contain NUL")
    for name, value in (*spec.env, *spec.secret_env):
        if not _ENV_NAME_RE.match(name):
            raise BackendError(f"env: name {name!r} must match ^[A-Z_][A-Z0-9_]*$")
        if "\0" in value:
            raise BackendError(f"env.{name}: must not contain NUL")


def launch_plan(
    store: JobStore,
    key: str,
    request: SubmitRequest,
    placement: Placement,
    *,
    bwrap: str,
    grace_s: float,
    account: tuple[int, int] | None,
    limits: JobLimits,
    blocked: list[str] | None = None,
    slirp4netns: str = "slirp4netns",
    image: CachedImage | None = None,
    pin: list[str] | None = None,
    api_web: str = "",
    cgroups: dict | None = None,
) -> dict[str, Any]:
    """What the supervisor runs: the command in the sandbox, as `account`, within `limits`;
    over `image`'s root file system when the task has one (images.py).

    `blocked` (sandbox.job_network()) gives the job a network kept from those networks,
    connected through `slirp4netns` (batch types); None leaves it none (agent and sandbox
    tasks). `api_web`: the portal's web address, for a batch task with `sandboxes: true`.
    `cgroups` (cgroup.locate()): where the job's own control group goes, which holds it to
    the memory and CPUs it asked for; None: the watchdog alone."""
    spec = request.spec
    jobdir = store.jobdir(key)
    work, home = os.path.join(jobdir, "work"), os.path.join(jobdir, "home")
    script = os.path.join(jobdir, "script.sh")
    argv = list(spec.command) if spec.command is not None else ["/bin/bash", script]
    # Built from nothing: the portal's environment (and its secrets) never reaches the job.
    env = {
        "PATH": SAFE_PATH,
        "HOME": home,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",  # a private tmpfs inside the sandbox
    }
    env.update((k, v) for k, v in spec.env if k not in RESERVED_ENV)
    env.update((k, v) for k, v in spec.secret_env if k not in RESERVED_ENV)
    env["SWITCHYARD_TASK_KEY"] = key
    env["SWITCHYARD_NODES"] = ",".join(placement.nodes)
    env.update(rank_env(spec, placement, env))  # rank 0 of 1, or of each node (ranks.py)
    # Every rank runs in this one sandbox, so it gets the device files of the GPUs of every
    # allocation (all of them the job's own), under their own names, and each rank's
    # CUDA_VISIBLE_DEVICES names its own node's GPUs among them as CUDA counts them
    # (decisions/devices.py). Always set, empty when no GPU was allocated: unset would expose
    # every GPU of the machine to the job. The allocation's own indices where its GPUs have
    # no device files (virtual GPUs).
    allocations = placement.allocations
    devices = job_devices(
        request.devices, [(a.node, a.gpu_indices) for a in allocations], device_minor
    )
    binds = devices.binds
    visible = [
        _indices(seen or a.gpu_indices)
        for seen, a in zip(devices.visible, allocations, strict=True)
    ]
    if binds:
        one = sorted({at for seen in devices.visible for at in seen})
    else:
        one = list(allocations[0].gpu_indices) if allocations else []
    env["CUDA_VISIBLE_DEVICES"] = _indices(one)
    # A multi-node job: one process per node it holds, all in the one sandbox (ranks.py).
    argv = rank_argv(argv, spec, placement, visible, grace_s=grace_s)
    chdir, system, runner = storage.workdir(request, work), None, None
    # The memory it booked: its request on every node it holds (one process tree here).
    memory = sum(a.memory_mib for a in placement.allocations) or spec.resources.memory_mib
    memory_bytes = memory << 20
    # A live sandbox: the agent in a home of its own, no job folders (sessionplan.py).
    session = None
    if spec.session_idle_s is not None:
        session = sessionplan.parts(store, key, spec, env, memory_bytes=memory_bytes, image=image)
        argv, env, chdir = session.argv, session.env, session.tmpfs[0]
    mounts = storage.mounts(request) if session is None else []
    relay = None if session else sessionplan.api_relay(store, key, spec, env, api_web, image)
    added = session or relay  # relay: `sandboxes: true`, their API only (sessionplan.py)
    if image is not None:
        if session is None:
            argv, env, image_dir = in_image(image, spec, env, script=script, work=work)
            chdir = request.storage.workdir or image_dir
        # BUSYBOX too: a link on its way would have bwrap make it outside the image.
        needed = [
            "/dev",
            "/proc",
            *TMPFS,
            BUSYBOX,
            store.root,
            *(added.needed if added else ()),
        ]
        needed += [m for m, _ in mounts]
        busybox = host_busybox() or "/bin/busybox"  # checked before (images.prepare)
        system = [*rootfs_binds(str(image.rootfs), needed), "--ro-bind", busybox, BUSYBOX]
        runner = busybox_limits(limits.max_processes, limits.max_disk_bytes)
    own = [work, home] if session is None else []  # HOME must be writable too
    argv = [
        *sandbox_argv(
            bwrap,
            writable=own,
            readonly=[script] if spec.script is not None else [],
            mounts=mounts,  # the site's storage areas of its pool
            hide=store.root,
            chdir=chdir,
            tmp_bytes=memory_bytes,
            max_processes=limits.max_processes,
            max_file_bytes=limits.max_disk_bytes,
            devices=bwrap_args(binds),
            system=system,
            runner=runner,
            extra=added.mounts if added else (),
        ),
        *(relay.prefix if relay else ()),  # forward.py, after an image's runner
        *argv,
    ]
    return {
        "argv": argv,
        # bwrap runs with the site's environment only; the job's (its image's Env, the task's)
        # is set inside the sandbox, by --clearenv and --setenv from a descriptor (shim.py).
        "env": dict(SITE_ENV),
        "job_env": env,
        "cwd": work if session is None else store.jobdir(key),
        "mkdirs": own,
        # The socket the supervisor binds for the agent (shim.py); None: not a session.
        "session": None if session is None else session.plan,
        "api_relay": relay.plan if relay else None,  # started by the supervisor (shim.py)
        "readable": [script] if spec.script is not None else [],
        # Checked by the supervisor before the sandbox starts: a missing one fails the job.
        "devices": [[host, missing_reason(host, what)] for host, _, what in binds],
        "run_as": list(account) if account else None,
        "image_pin": pin,  # held (shared) by the supervisor while the job runs
        "groups": storage.project_groups(request) if account else [],
        "umask": storage.umask(request),
        # Made and linked by the job's account as it starts, following no link on the way
        # (nolinks.py); a missing input, a link, a name taken fails it with the reason.
        "prepare": storage.prepare_plan(request, work) if session is None else None,
        "walltime_s": spec.walltime_s,
        "grace_s": grace_s,
        "bwrap": bwrap,
        # The supervisor connects the sandbox's network namespace (jobnet.py) when present;
        # without slirp4netns it fails the job (jobnet.SLIRP_MISSING).
        "network": None
        if blocked is None
        else {"blocked": list(blocked), "slirp4netns": shutil.which(slirp4netns) or ""},
        "output_cap": limits.max_output_bytes,
        "output_kept_as": store.kept_log_path(key),
        "limits": {
            "memory_bytes": memory_bytes,
            "max_processes": limits.max_processes,
            "processes_note": limits.processes_note,
            "disk_bytes": limits.max_disk_bytes,
            "disk_paths": own,
            "tmpfs": [*TMPFS, *(session.tmpfs if session else ())],  # memory too
        },
        # The kernel's limits (cgroup.py): its memory booked, and the CPUs it was given (what
        # it asked for, spread over its nodes; a whole node's, where it was given one).
        "cgroup": None
        if cgroups is None
        else {
            **cgroups,
            "memory_bytes": memory_bytes,
            "cpus": sum(a.cpus for a in allocations) or spec.resources.cpus,
        },
    }


def _indices(indices: Sequence[int]) -> str:
    return ",".join(str(i) for i in indices)


def write_plan(store: JobStore, key: str, plan: dict[str, Any]) -> None:
    # For a supervisor spawned directly (the launcher is sent the plan instead). marshal,
    # not JSON: it is built into the interpreter, while importing json would cost the
    # supervisor ~30 ms of start-up here. Read it with marshal.load().
    # 0600: the plan holds the job's environment, secret_env values included.
    fd = os.open(store.path(key, "launch.marshal"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        marshal.dump(plan, f, 4)


def start_supervisors(
    store: JobStore,
    plans: dict[str, dict[str, Any]],
    python: str,
    *,
    launcher: bool = True,
    children: dict[str, subprocess.Popen[bytes]],
) -> dict[str, str]:
    """Start the supervisors of these jobs (key -> launch plan); returns {key: why not} for
    those that could not start.

    Through the root's launcher (launcher.py, started here if none serves the root): a
    request for each part of them (`_parts`), the plans with it, a fork each. Should the
    launcher fail, or with `launcher` off, each plan is written beside its job and each
    supervisor spawned as an interpreter of its own (`spawn_supervisor`; the Popen goes into
    `children`, to be reaped).
    """
    if not plans:
        return {}
    failed: dict[str, str] = {}
    left = dict(plans)
    if launcher:
        # A pass that starts many jobs asks in parts (a request's size is bounded).
        parts = _parts(plans, failed)
        for key in failed:
            del left[key]
        try:
            for part in parts:
                try:
                    replies = _ask_launcher(store.root, part, python)
                except LauncherLost as exc:
                    # It may have started some of them: none is spawned here as well (a job
                    # would run twice). Each stays "starting"; the next poll finds its
                    # supervisor (shim.pid) or fails it for having none.
                    log.warning("the local launcher of %s did not answer: %s", store.root, exc)
                    for key in part:
                        del left[key]
                    continue
                for key, reply in zip(part, replies, strict=True):
                    del left[key]
                    if not reply.startswith("ok "):
                        failed[key] = reply.removeprefix("error ")
        except OSError as exc:
            log.warning(
                "the local launcher of %s failed (%s): spawning supervisors", store.root, exc
            )
    for key, plan in left.items():
        try:
            write_plan(store, key, plan)
            children[key] = spawn_supervisor(store, key, python)
        except OSError as exc:
            failed[key] = f"could not start the local supervisor: {exc}"
    return failed


def _parts(
    plans: dict[str, dict[str, Any]], failed: dict[str, str]
) -> list[dict[str, dict[str, Any]]]:
    """The plans in requests of at most LAUNCHER_BATCH jobs and MAX_REQUEST_BYTES; a plan
    too big for a request of its own goes into `failed` instead, saying so."""
    parts: list[dict[str, dict[str, Any]]] = [{}]
    size = 0
    for key, plan in plans.items():
        # As launcher.request_bytes frames it: a line with the key and size, then the plan.
        n = len(marshal.dumps(plan, 4)) + len(key) + 24
        if n > MAX_REQUEST_BYTES:
            failed[key] = (
                f"the job's launch plan takes {n} bytes, more than the local launcher takes "
                f"({MAX_REQUEST_BYTES}): its environment, command or image is too large"
            )
            continue
        if len(parts[-1]) >= LAUNCHER_BATCH or size + n > MAX_REQUEST_BYTES:
            parts.append({})
            size = 0
        parts[-1][key] = plan
        size += n
    return [part for part in parts if part]


def _ask_launcher(root: str, plans: dict[str, dict[str, Any]], python: str) -> list[str]:
    """Send the jobs to the root's launcher (starting it if need be); one answer per job."""
    path = launcher_socket_path(root)
    request = launcher_request({key: marshal.dumps(plan, 4) for key, plan in plans.items()})
    for attempt in range(5):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(LAUNCHER_TIMEOUT_S)
            try:
                at_path(conn.connect, path)
            except (FileNotFoundError, ConnectionRefusedError):
                # None serves the root (or a dead one's socket is left): start one. Another
                # worker may be starting one too: the root's lock lets one of them serve.
                _start_launcher(root, python)
                if attempt:
                    time.sleep(0.01 * attempt)
                continue
            try:
                conn.sendall(request)
                conn.shutdown(socket.SHUT_WR)
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
            except OSError as exc:
                raise LauncherLost(f"{exc} after the request was sent") from exc
        finally:
            conn.close()
        replies = data.decode("ascii", "replace").splitlines()
        if replies == ["stale"]:
            continue  # its code was upgraded: it has gone, the next attempt starts the new
        if len(replies) != len(plans):
            raise LauncherLost(f"it answered {replies[:3]} for {len(plans)} jobs")
        return replies
    raise OSError(f"no launcher answers at {path}")


class LauncherLost(OSError):
    """The launcher had the request but its answer did not come whole: some of the jobs
    may have started."""


def _start_launcher(root: str, python: str) -> None:
    """Run `python -I -S -c 'import launcher …' <root>`; it returns once it listens (its
    server goes on detached), or at once if another launcher holds the root."""
    subprocess.run(
        [python, "-I", "-S", "-c", _RUN_LAUNCHER, root],
        cwd=root,
        timeout=LAUNCHER_TIMEOUT_S,
        check=False,
        **_DETACHED,
    )


def stop_launcher(root: str) -> bool:
    """SIGTERM the root's launcher, if one runs (its supervisors go on); True if one did."""
    try:
        with open(launcher_pid_path(root), encoding="ascii") as f:
            pid_s, start_s = f.read().split()
    except (OSError, ValueError):
        return False
    pid = int(pid_s)
    if proc_start_time(pid) != int(start_s):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    return True


def spawn_supervisor(store: JobStore, key: str, python: str) -> subprocess.Popen[bytes]:
    """Start the supervisor (`python -I -S -c 'import shim …' <jobdir>`) detached; record its
    pid and start time."""
    jobdir = store.jobdir(key)
    child = subprocess.Popen([python, "-I", "-S", "-c", _RUN_SHIM, jobdir], cwd=jobdir, **_DETACHED)
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
