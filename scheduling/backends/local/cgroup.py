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
    for controller, name in (("memory", "memory.limit_in_bytes"), ("cpu", "cpu.cfs_quota_us")):
        group = os.path.dirname(where[controller])
        if not os.path.exists(os.path.join(group, name)):
            return None, f"{group} has no {name}"
    return where, ""


def _delegated(folder: str) -> tuple[dict[str, str] | None, str]:
    """A cgroup v2 folder the site delegated to the portal, with the controllers enabled."""
    if not os.path.isabs(folder):
        return None, f"{folder} is not an absolute path"
    named, folder = folder, os.path.normpath("/" + folder.lstrip("/"))  # `//x/`: /x
    if os.path.realpath(folder) != folder:
        return None, f"{named} is a link (name the folder it leads to)"
    if not any(
        folder == mount or folder.startswith(mount.rstrip("/") + "/") for mount in _v2_mounts()
    ):
        return None, f"{folder} is not on a cgroup2 file system"
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


def _v2_mounts() -> list[str]:
    """The mount points of cgroup2 file systems (/proc/self/mountinfo)."""
    found = []
    for line in _lines("/proc/self/mountinfo"):
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) >= 5 and rest and rest[0] == "cgroup2":
            found.append(fields[4])
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


def lacks_dynmods(mounts: str = "/proc/mounts") -> bool:
    """Whether the host mounts cgroup2 without `favordynmods` (docker/cgroup-dynmods.sh sets
    it; the switch is the kernel's, one for all hierarchies, so a v1 mount with it counts).
    Without it, moving a process into a group waits for an RCU grace period (some 5 ms), and
    every fork on the host waits with it: a cost each job's start pays. A host with no
    cgroup2 mount has nowhere the script could set it: False."""
    v2 = flagged = False
    for line in _lines(mounts):
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            v2 = v2 or fields[2] == "cgroup2"
            flagged = flagged or "favordynmods" in fields[3].split(",")
    return v2 and not flagged


# -- in the supervisor ----------------------------------------------------------------------


def make(limits: dict, key: str) -> list[str]:
    """The job's groups, made with its limits (the launch plan's `cgroup`: where, tag, its
    memory in bytes, its CPUs): the folders, which its child joins (`join`)."""
    memory_bytes = limits["memory_bytes"]
    quota = max(1000, round(limits["cpus"] * PERIOD_US))
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
                _notice_oom(folder)
            elif hierarchy == "cpu":
                _write(folder, "cpu.cfs_period_us", str(PERIOD_US))
                _write(folder, "cpu.cfs_quota_us", str(max(1000, min(quota, _quota_above(base)))))
    except OSError as exc:
        remove(made)
        raise CgroupError(f"the job's control group could not be made: {exc}") from exc
    return made


# cgroup v1: per job's memory group, an eventfd the kernel signals when the group's own limit
# (or a group's above it) sets the out-of-memory killer to work, never the host's; and the
# groups whose eventfd has been signalled. v1 counts kills by any killer, the host's included.
_OOM_NOTICE: dict[str, int] = {}
_OOM_SEEN: set[str] = set()


def _notice_oom(folder: str) -> None:
    """Ask the kernel for the group's out-of-memory notices (cgroup.event_control); where it
    cannot, `over_limit` goes by the job's peak alone."""
    try:
        notice = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    except (AttributeError, OSError):
        return
    try:
        control = os.open(os.path.join(folder, "memory.oom_control"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            _write(folder, "cgroup.event_control", f"{notice} {control}")
        finally:
            os.close(control)
    except OSError:
        os.close(notice)
        return
    _OOM_NOTICE[folder] = notice


def _noticed_oom(folder: str) -> bool:
    """Whether the kernel signalled the group's eventfd (True where none was set)."""
    notice = _OOM_NOTICE.get(folder)
    if notice is None or folder in _OOM_SEEN:
        return True
    try:
        if os.eventfd_read(notice) > 0:
            _OOM_SEEN.add(folder)
    except BlockingIOError:
        pass
    return folder in _OOM_SEEN


def _quota_above(folder: str) -> int:
    """cgroup v1 refuses a group more CPU time than a group above it has (v2 takes it and
    applies the smaller): the least quota per `PERIOD_US` of `folder` and the groups above
    it, up to the hierarchy's root (no quota: unbounded)."""
    least = 1 << 62
    while True:
        quota = _counters(folder, "cpu.cfs_quota_us", whole=True)
        period = _counters(folder, "cpu.cfs_period_us", whole=True)
        if quota is None or period is None:  # past the hierarchy's root (or not made yet)
            if not os.path.exists(folder) and folder != os.path.dirname(folder):
                folder = os.path.dirname(folder)
                continue
            return least
        if quota[b""] > 0 and period[b""] > 0:
            least = min(least, quota[b""] * PERIOD_US // period[b""])
        if folder == os.path.dirname(folder):
            return least
        folder = os.path.dirname(folder)


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
        if v2 is not None:  # `oom`: the group's own limit (or a group's below it) reached
            return v2.get(b"oom_kill", 0) > 0 and v2.get(b"oom", 0) > 0
        v1 = _counters(folder, "memory.oom_control")
        if v1 is not None:  # noticed, and its peak at its own limit (not a group's above)
            limit, peak = (
                (_counters(folder, name, whole=True) or {}).get(b"", 0)
                for name in ("memory.limit_in_bytes", "memory.max_usage_in_bytes")
            )
            return v1.get(b"oom_kill", 0) > 0 and peak >= limit and _noticed_oom(folder)
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
        notice = _OOM_NOTICE.pop(folder, None)
        if notice is not None:  # signalled as the group goes: no longer read
            os.close(notice)
        _OOM_SEEN.discard(folder)
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
