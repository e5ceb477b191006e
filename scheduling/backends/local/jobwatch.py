"""What a running job uses, read from /proc and its folder: the supervisor's watchdog.

Control groups are not available on every machine this runs on (docs/security.md), so the
limits a job asked for are watched from outside as well: the supervisor samples the job's
process tree a few times a second (with the files it holds in its tmpfs mounts, which are
memory) and its folder every few seconds, and kills the job with a reason that names the
limit it broke. Where the job has a control group (cgroup.py), the kernel holds its memory to
the request first, and a process of it killed for that ends the whole job here. Standard
library `os` only: the supervisor imports this by path.
"""

from __future__ import annotations

import os

_MIB = 1024 * 1024


def process_tree(root: int) -> list[int]:
    """`root` and every process below it (children of any of their threads)."""
    found = [root]
    i = 0
    while i < len(found):
        pid = found[i]
        i += 1
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    found.extend(int(child) for child in f.read().split())
            except (OSError, ValueError):
                continue
    return found


def tree_usage(pids: list[int]) -> tuple[int, int, int]:
    """(bytes of anonymous memory, bytes of shared memory, tasks) of these processes.

    Memory is anonymous plus shared-memory pages resident (RssAnon, RssShmem): what the job
    itself allocated, not the shared libraries and file cache every process maps. Tasks are
    processes and their threads, which is what the process limit counts.
    """
    anon = shmem = tasks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                text = f.read()
        except OSError:
            continue
        for line in text.split(b"\n"):
            if line.startswith(b"RssAnon:"):
                anon += int(line.split()[1]) * 1024  # kB
            elif line.startswith(b"RssShmem:"):
                shmem += int(line.split()[1]) * 1024
            elif line.startswith(b"Threads:"):
                tasks += int(line.split()[1])
    return anon, shmem, tasks


def tmpfs_usage(sandbox_pid: int, mounts: list[str]) -> list[tuple[str, int]]:
    """(mount, bytes its files hold) of the sandbox's tmpfs mounts, seen through its root.

    A file in tmpfs is memory whether or not a process maps it, and it outlives the process
    that wrote it. The sandbox makes these mount points and the folders above them
    read-only, so the job cannot swap them for something else. Nothing until the sandbox
    has its own root: while bubblewrap sets it up, its root is still the host's.
    """
    root = f"/proc/{sandbox_pid}/root"
    try:
        if os.stat(root).st_dev == _HOST_ROOT_DEV:
            return []
    except OSError:
        return []  # gone
    held = []
    for mount in mounts:
        try:
            st = os.statvfs(root + mount)
        except OSError:
            continue  # not made yet
        held.append((mount, (st.f_blocks - st.f_bfree) * st.f_frsize))
    return held


_HOST_ROOT_DEV = os.stat("/").st_dev


def memfd_usage(pids: list[int]) -> int:
    """Bytes held by the anonymous memory files (memfd_create) these processes have open.

    Such a file is memory in no mount: written, not mapped, it is in no process's RSS
    either. Each counted once, however many descriptors it has.
    """
    seen = set()
    total = 0
    for pid in pids:
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for name in names:
            path = f"{fds}/{name}"
            try:
                if not os.readlink(path).startswith("/memfd:"):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def mapped_from(pids: list[int], sandbox_pid: int, mounts: list[str]) -> int:
    """Bytes of the files of these tmpfs mounts, and of memfd files, that these processes
    have mapped (resident file pages, not the copies they wrote into private mappings):
    counted in their RssShmem as well as in the mount's or the memfd's use."""
    devices = set()
    for mount in mounts:
        try:
            st = os.stat(f"/proc/{sandbox_pid}/root{mount}")
        except OSError:
            continue
        devices.add((os.major(st.st_dev), os.minor(st.st_dev)))
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps", "rb") as f:
                text = f.read()
        except OSError:
            continue
        inside = False
        rss = 0
        for line in text.split(b"\n"):
            head = line.split(maxsplit=5)
            if len(head) >= 5 and b"-" in head[0] and b":" in head[3]:
                major, minor = head[3].split(b":")
                inside = (int(major, 16), int(minor, 16)) in devices or (
                    len(head) == 6 and head[5].startswith(b"/memfd:")
                )
            elif inside and line.startswith(b"Rss:"):
                rss = int(line.split()[1]) * 1024
            elif inside and line.startswith(b"Anonymous:"):
                total += max(0, rss - int(line.split()[1]) * 1024)
    return total


_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def tree_cpu_ms(pids: list[int]) -> int:
    """CPU time of these processes and of the children they have reaped (utime + stime +
    cutime + cstime): a process that ended inside the job counts once, in its reaper."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        ticks += sum(int(v) for v in fields[11:15])  # the 14th to 17th fields of stat
    return round(ticks * _TICK_MS)


def folder_usage(paths: list[str], max_entries: int) -> tuple[int, int]:
    """(bytes on disk, entries) under these folders, symlinks not followed.

    Stops counting after `max_entries`: a job that made more files than that is over the
    limit whatever their size, and the walk stays cheap.
    """
    used = entries = 0
    todo = list(paths)
    while todo and entries <= max_entries:
        try:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return used, entries


def _where(held: list[tuple[str, int]]) -> str:
    """What the job's tmpfs mounts and memory files hold, in words (half a MiB or more)."""
    return ", ".join(f"{size_text(n)} in {m}" for m, n in held if n >= _MIB // 2)


def size_text(n: int) -> str:
    """`268435456` → `256 MiB`, `1610612736` → `1.5 GiB`."""
    if n >= 1024 * _MIB:
        gib = n / (1024 * _MIB)
        return f"{gib:.1f} GiB".replace(".0 GiB", " GiB")
    return f"{max(0, round(n / _MIB))} MiB"


class Limits:
    """The job's limits and the sampling of its use; `check` names the first one broken."""

    WATCH_S = 0.2  # processes and memory
    DISK_S = 2.0  # the folder

    def __init__(
        self,
        limits: dict,
        root_pid: int,
        now: float,
        sandbox_pid: int | None = None,
        over_limit=None,
    ) -> None:
        self.memory = limits.get("memory_bytes")
        # The job's control group (cgroup.py): whether the kernel killed a process of it for
        # its memory limit, which ends the whole job.
        self.over_limit = over_limit
        self.memory_field = limits.get("memory_field", "resources.memory")
        self.processes = limits.get("max_processes")
        self.processes_note = limits.get("processes_note") or ""
        self.disk = limits.get("disk_bytes")
        self.disk_paths = list(limits.get("disk_paths") or ())
        self.max_entries = int(limits.get("max_entries") or 200_000)
        self.root_pid = root_pid
        # The tmpfs mounts the job can write (paths in the sandbox, read through its init).
        self.tmpfs = list(limits.get("tmpfs") or ()) if sandbox_pid else []
        self.sandbox_pid = sandbox_pid
        self.next_watch = now
        self.next_disk = now + self.DISK_S
        self.peak_memory = 0
        self.cpu_ms = 0  # the most CPU time the tree has shown: what the job used

    def due(self, now: float) -> float:
        """Seconds until the next sample is due (0: now)."""
        wanted = [self.next_watch]  # always: the CPU time is sampled too
        if self.disk and self.disk_paths:
            wanted.append(self.next_disk)
        return max(0.0, min(wanted) - now) if wanted else 3600.0

    def check(self, now: float) -> str | None:
        if now >= self.next_watch:
            self.next_watch = now + self.WATCH_S
            tree = process_tree(self.root_pid)
            anon, shmem, tasks = tree_usage(tree)
            held = tmpfs_usage(self.sandbox_pid, self.tmpfs) if self.sandbox_pid else []
            if self.tmpfs:
                held.append(("memfd files", memfd_usage(tree)))
            in_files = sum(n for _, n in held)
            memory = anon + shmem + in_files
            # Without a sandbox pid no tmpfs is read and in_files is 0: the check costs nothing.
            if self.memory and memory > self.memory and shmem and in_files and self.sandbox_pid:
                # A tmpfs file the job maps is in both: count it once. Read only when it
                # decides (smaps costs more than status).
                memory -= min(shmem, mapped_from(tree, self.sandbox_pid, self.tmpfs))
            self.peak_memory = max(self.peak_memory, memory)
            self.cpu_ms = max(self.cpu_ms, tree_cpu_ms(tree))
            if self.memory and self.over_limit is not None and self.over_limit():
                where = _where(held)
                return (
                    f"memory limit: the job used all of the {size_text(self.memory)} it asked "
                    f"for ({self.memory_field}){f', {where},' if where else ''} and the "
                    "kernel refused it more; killed"
                )
            if self.memory and memory > self.memory:
                where = _where(held)
                return (
                    f"memory limit: the job used {size_text(memory)}"
                    f"{f' ({where})' if where else ''}, over the "
                    f"{size_text(self.memory)} it asked for ({self.memory_field}); killed"
                )
            if self.processes and tasks >= self.processes:
                note = f": {self.processes_note}" if self.processes_note else ""
                return (
                    f"process limit: the job reached {tasks} processes and threads, the most "
                    f"a job may have here ({self.processes}{note}); killed"
                )
        if self.disk and self.disk_paths and now >= self.next_disk:
            self.next_disk = now + self.DISK_S
            used, entries = folder_usage(self.disk_paths, self.max_entries)
            if entries > self.max_entries:
                return (
                    f"disk limit: the job's folder holds more than {self.max_entries} files, "
                    "the most a job may keep here; killed"
                )
            if used > self.disk:
                return (
                    f"disk limit: the job's folder holds {size_text(used)}, over the "
                    f"{size_text(self.disk)} a job may keep here; killed"
                )
        return None


class OutputLog:
    """The job's output.log, written by the supervisor from the job's pipe, up to a cap.

    Past the cap the log ends with a marker and the rest is read and dropped, so the job is
    never blocked on a full pipe and the disk never fills. With `kept_as`, the file gets that
    second name at once: the portal reads the log there (the path it recorded at submission),
    and it stays when the job's folder is removed.
    """

    def __init__(self, path: str, cap: int | None, *, kept_as: str | None = None) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if kept_as:
            try:  # noqa: SIM105 - `os` only here: the supervisor imports this by path
                os.link(path, kept_as)
            except FileExistsError:  # a restarted supervisor linked it already
                pass
        self.written = os.fstat(self.fd).st_size
        self.cap = cap
        self.cut = False
        self.tail = b""  # the last bytes the job printed, for the reason it ended

    def last_line(self) -> str:
        lines = self.tail.rstrip(b"\n").rsplit(b"\n", 1)
        return lines[-1].decode("utf-8", "replace").strip()

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.tail = (self.tail + data)[-512:]
        if self.cut:
            return
        if self.cap is not None and self.written + len(data) > self.cap:
            data = data[: max(0, self.cap - self.written)]
            self.cut = True
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.written += len(data)
        if self.cut:
            os.write(
                self.fd,
                f"\n[switchyard: output cut at {size_text(self.cap or 0)}, the most a job's log "
                "keeps here; what the job printed after that was dropped]\n".encode(),
            )

    def close(self) -> None:
        os.close(self.fd)
