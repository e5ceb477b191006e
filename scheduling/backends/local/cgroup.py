"""A local job's own control group: the kernel holds it to the memory and CPUs it asked for.

The watchdog (jobwatch.py) sees only what /proc shows of a job. Memory it cannot see (a
System V segment no process has attached, a memory file whose only descriptor is in flight in
a socket) is still charged to the control group of the process that touched it, so where the
supervisor may make control groups each job gets one: its memory limit is its request (on
every node it holds), with no swap beyond it where the kernel accounts swap, and its CPU time
is capped at the CPUs it asked for. The kernel refuses the job memory past its limit (its
out-of-memory killer picks a process of the job), and the supervisor then ends the whole job
with a reason that names the limit (docs/security.md, "Limits").

`locate()` runs in the backend: where job groups go, or why there are none (`auto` uses
them only as root, in the worker's own memory and cpu groups of a cgroup v1 hierarchy; a path
names a cgroup v2 folder delegated to the portal, with `memory` and `cpu` in its
`cgroup.subtree_control`). It makes nothing: the supervisor (shim.py) makes each job's group,
in every hierarchy's folder, named `<the backend's tag>-<key>`, so that the groups of two
backends' jobs of one key never meet. This file is imported by path there: `os` only.
"""

from __future__ import annotations

import os

FOLDER = "switchyard"  # v1: in the worker's own group, the folder of the jobs' groups
PERIOD_US = 100_000  # the CPU quota's period (the kernel's default)


class CgroupError(Exception):
    """The job's group could not be made: the reason says why."""


def locate(setting: str, root: str) -> tuple[dict | None, str]:
    """({"where": {hierarchy: folder}, "tag": …}, "") or (None, why jobs have none).

    `setting` is `auto`, `off`, or a cgroup v2 folder delegated to the portal; `root` the
    backend's own folder, whose hash tags its jobs' groups. Hierarchies: `memory` and `cpu`
    (cgroup v1; one folder where they are mounted together), or `unified` (v2)."""
    import hashlib

    if setting == "off":
        return None, "switched off (SWITCHYARD_JOB_CGROUP=off)"
    where, why = _auto() if setting == "auto" else _delegated(setting)
    if where is None:
        return None, why
    tag = "r" + hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:12]
    return {"where": where, "tag": tag}, ""


def _auto() -> tuple[dict[str, str] | None, str]:
    if os.geteuid() != 0:
        return None, "the worker is not root, so it may not make control groups"
    mounts, own = _v1_mounts(), _own_groups()
    where: dict[str, str] = {}
    for controller in ("memory", "cpu"):
        if controller not in mounts or controller not in own:
            return None, (
                f"no cgroup v1 {controller} hierarchy (on cgroup v2, name a folder "
                "delegated to the worker)"
            )
        mount, mount_root = mounts[controller]
        path = own[controller]
        if mount_root != "/" and path.startswith(mount_root):
            path = path[len(mount_root) :]
        group = mount + path.rstrip("/")
        if not os.access(group, os.W_OK):
            return None, f"{group} is not writable by the worker"
        where[controller] = os.path.join(group, FOLDER)
    if not os.path.exists(os.path.join(os.path.dirname(where["memory"]), "memory.limit_in_bytes")):
        return None, f"{os.path.dirname(where['memory'])} has no memory.limit_in_bytes"
    return where, ""


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


def _lines(path: str) -> list[str]:
    """A /proc file's lines (none if it cannot be read)."""
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError:
        return []


def _v1_mounts() -> dict[str, tuple[str, str]]:
    """controller -> (mount point, the hierarchy's folder mounted there), cgroup v1 only."""
    found: dict[str, tuple[str, str]] = {}
    for line in _lines("/proc/self/mountinfo"):
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
    for line in _lines("/proc/self/cgroup"):
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller:
                found[controller] = path
    return found


def favors_dynmods(mounts: str = "/proc/mounts") -> bool:
    """Whether a cgroup2 mount has `favordynmods` (docker/cgroup-dynmods.sh). Without it,
    moving a process into a group waits for an RCU grace period (some 5 ms), and every fork
    on the host waits with it: a cost each job's start pays."""
    for line in _lines(mounts):
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup2" and "favordynmods" in fields[3].split(","):
            return True
    return False


# -- in the supervisor ----------------------------------------------------------------------


def make(limits: dict, key: str) -> list[str]:
    """The job's groups, made with its limits (the launch plan's `cgroup`: where, tag, its
    memory in bytes, its CPUs): the folders, which its child joins (`join`)."""
    memory_bytes = limits["memory_bytes"]
    quota = str(max(1000, round(limits["cpus"] * PERIOD_US)))
    made: list[str] = []
    try:
        for hierarchy, base in limits["where"].items():
            folder = os.path.join(base, f"{limits['tag']}-{key}")
            if folder not in made:  # v1 memory and cpu mounted together: one folder
                _mkdir(folder)
                made.append(folder)
            if hierarchy == "unified":
                _write(folder, "memory.max", str(memory_bytes))
                _write(folder, "memory.swap.max", "0", missing_ok=True)
                _write(folder, "cpu.max", f"{quota} {PERIOD_US}")
            elif hierarchy == "memory":
                _write(folder, "memory.limit_in_bytes", str(memory_bytes))
                # No swap past the limit where the kernel accounts swap; where it does not,
                # the least swapping it does for the group.
                if os.path.exists(os.path.join(folder, "memory.memsw.limit_in_bytes")):
                    _write(folder, "memory.memsw.limit_in_bytes", str(memory_bytes))
                else:
                    _write(folder, "memory.swappiness", "0", missing_ok=True)
            elif hierarchy == "cpu":
                _write(folder, "cpu.cfs_period_us", str(PERIOD_US))
                _write(folder, "cpu.cfs_quota_us", quota)
    except OSError as exc:
        remove(made)
        raise CgroupError(f"the job's control group could not be made: {exc}") from exc
    return made


def _mkdir(folder: str) -> None:
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:  # an earlier supervisor's of this key, left empty
        os.rmdir(folder)
        os.mkdir(folder, 0o755)
    except FileNotFoundError:  # v1: the jobs' folder, made by the first job
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


def join(folders: list[str]) -> str:
    """Move the calling process into these groups (the child, before it drops root); why it
    could not, or ""."""
    try:
        for folder in folders:
            _write(folder, "cgroup.procs", "0")
    except OSError as exc:
        return f"the job's control group could not be joined: {exc}"
    return ""


def over_limit(folders: list[str]) -> bool:
    """Whether the kernel killed a process of the job because the job reached its own memory
    limit (not because the host, or a group above the job's, ran out)."""
    for folder in folders:
        v2 = _counters(folder, "memory.events")
        if v2 is not None:
            return v2.get(b"oom_kill", 0) > 0 and v2.get(b"max", 0) > 0
        v1 = _counters(folder, "memory.oom_control")
        if v1 is not None:  # its peak at its limit (failcnt stays 0 on some kernels)
            limit, peak = (
                (_counters(folder, name, whole=True) or {}).get(b"", 0)
                for name in ("memory.limit_in_bytes", "memory.max_usage_in_bytes")
            )
            return v1.get(b"oom_kill", 0) > 0 and peak >= limit
    return False


def _counters(folder: str, name: str, *, whole: bool = False) -> dict[bytes, int] | None:
    """`name`'s "key value" lines (with `whole`: the file's one number, under b"")."""
    try:
        with open(os.path.join(folder, name), "rb") as f:
            text = f.read()
    except OSError:
        return None
    if whole:
        return {b"": int(text.strip() or 0)}
    found = {}
    for line in text.split(b"\n"):
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    return found


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


def sweep(where: dict, ended) -> None:
    """Remove the groups of this backend's jobs that have ended (`ended(key)`), left behind by
    a supervisor that could not (a process slow to die, a supervisor killed)."""
    prefix = where["tag"] + "-"
    for base in set(where["where"].values()):
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            folder = os.path.join(base, name)
            if name.startswith(prefix) and os.path.isdir(folder) and ended(name[len(prefix) :]):
                try:  # noqa: SIM105 (contextlib is an import this file avoids)
                    os.rmdir(folder)
                except OSError:
                    pass  # a process of it still there: the next sweep
