"""A local job's own control group: the kernel holds it to the memory and CPUs it asked for.

The watchdog (jobwatch.py) sees only what /proc shows of a job. Memory it cannot see (a
System V segment no process has attached, a memory file whose only descriptor is in flight in
a socket) is still charged to the control group of the process that touched it, so where the
supervisor may make control groups each job gets one: its memory limit is its request (on
every node it holds), with no swap beyond it, and its CPU time is capped at the CPUs it asked
for. The kernel refuses the job memory past its limit (its out-of-memory killer picks a
process of the job), and the supervisor then ends the whole job with a reason that names the
limit (docs/security.md, "Limits").

`locate()` runs in the backend, once: where job groups go, or why there are none (`auto`
makes them only as root, in the worker's own memory and cpu groups of a cgroup v1 hierarchy;
a path names a cgroup v2 folder delegated to the portal, with `memory` and `cpu` in its
`cgroup.subtree_control`). The rest runs in the supervisor (shim.py), which imports this
file by path: standard library `os` only.
"""

from __future__ import annotations

import os

CGROUP_ROOT = "/sys/fs/cgroup"
FOLDER = "switchyard"  # under the worker's own group: every job's group, by its key
PERIOD_US = 100_000  # the CPU quota's period (the kernel's default)


class CgroupError(Exception):
    """Where job groups were to go, they cannot: the reason says why."""


def locate(setting: str, root: str) -> tuple[dict[str, str] | None, str]:
    """(where each job's groups go, "") or (None, why jobs have none): `setting` is `auto`,
    `off`, or a cgroup v2 folder delegated to the portal; `root` the backend's own folder,
    whose jobs' groups are kept apart from any other's (keys are unique within a root).

    The answer maps a hierarchy to the folder its job groups are made in: `memory` and `cpu`
    (cgroup v1), or `unified` (v2)."""
    import hashlib

    found, why = _locate(setting)
    if found is None:
        return None, why
    # Made by the first job's supervisor, removed by the last (`make`, `remove`).
    apart = "root-" + hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:12]
    return {hierarchy: os.path.join(base, apart) for hierarchy, base in found.items()}, ""


def _locate(setting: str) -> tuple[dict[str, str] | None, str]:
    if setting == "off":
        return None, "switched off (SWITCHYARD_JOB_CGROUP=off)"
    if setting != "auto":
        return _delegated(setting)
    if os.geteuid() != 0:
        return None, "the worker is not root, so it may not make control groups"
    mounts = _v1_mounts()
    own = _own_groups()
    found: dict[str, str] = {}
    for controller in ("memory", "cpu"):
        if controller not in mounts or controller not in own:
            return (
                None,
                f"no cgroup v1 {controller} hierarchy (cgroup v2 needs a folder: docs/security.md)",
            )
        mount, mount_root = mounts[controller]
        path = own[controller]
        if mount_root != "/" and path.startswith(mount_root):
            path = path[len(mount_root) :]
        folder = os.path.join(mount + path.rstrip("/"), FOLDER)
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            return None, f"{folder} cannot be made: {exc.strerror}"
        found[controller] = folder
    if not os.path.exists(os.path.join(found["memory"], "memory.limit_in_bytes")):
        return None, f"{found['memory']} has no memory.limit_in_bytes"
    return found, ""


def _delegated(folder: str) -> tuple[dict[str, str] | None, str]:
    """A cgroup v2 folder the site delegated to the portal, with the controllers enabled."""
    try:
        with open(os.path.join(folder, "cgroup.subtree_control")) as f:
            enabled = f.read().split()
    except OSError as exc:
        return None, f"{folder} is not a cgroup v2 folder: {exc.strerror}"
    missing = [c for c in ("memory", "cpu") if c not in enabled]
    if missing:
        return None, (
            f"{folder}/cgroup.subtree_control lacks {' and '.join(missing)} "
            f"(write '+memory +cpu' to it)"
        )
    if not os.access(folder, os.W_OK):
        return None, f"{folder} is not writable by the worker"
    return {"unified": folder}, ""


def _v1_mounts() -> dict[str, tuple[str, str]]:
    """controller -> (mount point, the hierarchy's folder mounted there), cgroup v1 only."""
    found: dict[str, tuple[str, str]] = {}
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] != "cgroup":
            continue
        for controller in rest[2].split(","):
            found.setdefault(controller, (fields[4], fields[3]))
    return found


def _own_groups() -> dict[str, str]:
    """controller -> this process's group in its v1 hierarchy (/proc/self/cgroup)."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller:
                found[controller] = path
    return found


# -- in the supervisor ----------------------------------------------------------------------


def make(limits: dict, key: str) -> list[str]:
    """The job's groups, made with its limits (the launch plan's `cgroup`: where, its memory
    in bytes, its CPUs): the folders, which its child joins (`join`)."""
    memory_bytes, cpus = limits["memory_bytes"], limits["cpus"]
    made: list[str] = []
    try:
        for hierarchy, base in limits["where"].items():
            folder = os.path.join(base, key)
            _mkdir(folder)
            made.append(folder)
            quota = str(max(1000, round(cpus * PERIOD_US)))
            if hierarchy == "unified":
                _write(folder, "memory.max", str(memory_bytes))
                _write(folder, "memory.swap.max", "0", missing_ok=True)
                _write(folder, "cpu.max", f"{quota} {PERIOD_US}")
            elif hierarchy == "memory":
                _write(folder, "memory.limit_in_bytes", str(memory_bytes))
                # No swap past the limit, where the kernel accounts swap at all.
                _write(folder, "memory.memsw.limit_in_bytes", str(memory_bytes), missing_ok=True)
            else:
                _write(folder, "cpu.cfs_period_us", str(PERIOD_US))
                _write(folder, "cpu.cfs_quota_us", quota)
    except OSError as exc:
        remove(made)
        raise CgroupError(f"the job's control group could not be made: {exc}") from exc
    return made


def _mkdir(folder: str) -> None:
    """Make the job's group, and the backend's above it (which the last job's supervisor
    to end may remove meanwhile: then again)."""
    for attempt in range(3):
        try:
            os.mkdir(folder, 0o755)
            return
        except FileExistsError:  # an earlier supervisor's of this key, left empty
            os.rmdir(folder)
        except FileNotFoundError:
            if attempt == 2:
                raise
            os.makedirs(os.path.dirname(folder), 0o755, exist_ok=True)
    os.mkdir(folder, 0o755)


def _write(folder: str, name: str, value: str, *, missing_ok: bool = False) -> None:
    try:
        fd = os.open(os.path.join(folder, name), os.O_WRONLY)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def join(folders: list[str]) -> None:
    """Move the calling process into these groups (the child, before it drops root)."""
    for folder in folders:
        _write(folder, "cgroup.procs", "0")


def oom_kills(folders: list[str]) -> int:
    """How many of the job's processes the kernel killed for its memory limit."""
    for folder in folders:
        for name in ("memory.events", "memory.oom_control"):
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    text = f.read()
            except FileNotFoundError:
                continue
            except OSError:
                return 0
            for line in text.split(b"\n"):
                if line.startswith(b"oom_kill "):
                    return int(line.split()[1])
    return 0


def remove(folders: list[str], *, wait_s: float = 2.0) -> None:
    """Remove the job's groups once its last process is gone (the kernel refuses before)."""
    import time

    end = time.monotonic() + wait_s
    for folder in folders:
        while True:
            try:
                os.rmdir(folder)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() >= end:
                    break  # a process still dying: left for the backend's sweep
                time.sleep(0.05)
        try:  # noqa: SIM105 (contextlib is an import this file avoids)
            os.rmdir(os.path.dirname(folder))  # the backend's, once no job has one there
        except OSError:
            pass  # another job's group is in it


def sweep(where: dict[str, str], ended) -> None:
    """Remove the groups of jobs that have ended (`ended(key)`), left behind by a supervisor
    that could not (a process that took long to die, a supervisor killed)."""
    for base in where.values():
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if os.path.isdir(os.path.join(base, name)) and ended(name):
                try:  # noqa: SIM105 (contextlib is an import this file avoids)
                    os.rmdir(os.path.join(base, name))
                except OSError:
                    pass  # a process of it still there: the next sweep
