"""The local backend's state on disk: one folder per job, shared by every worker process.

    root/lock               flock'ed around every scheduling pass and state transition
    root/seq                submit counter (FIFO order among equal priorities)
    root/drained.json       {node: reason} of drained virtual nodes
    root/leases.json        {lease: {"nodes": [...], "pool": borrower, "until": epoch}}
    root/active/<key>       one empty file per job not yet finished (keeps a pass O(active))
    root/ended/<key>        one empty file per finished job still in jobs/ (its mtime: when)
    root/logs/<key>.log     the job's output.log under a second name (a hard link made when
                            the supervisor opens it), kept when retention removes the folder,
    root/logs/<key>.json    its final state
    root/run/               the launcher's socket, lock and pid (launcher.py), 0700
    root/jobs/<key>/        one job; its key is its backend id
        request.json        the SubmitRequest (spec via TaskSpec.as_dict()), and under
                            "pending" the job's submit number and time
        state.json          pending | starting | running | final state (atomic tmp+replace);
                            from "starting" on it holds the placement (`allocations`).
                            Absent while the job waits as it was stored: read_state then
                            gives its pending state from request.json.
        priority            set_priority's number (higher starts first); without it, the
                            request's own
        launch.marshal      argv / env / cwd / limits the supervisor runs with (marshal: see
                            shim.py; read it with `marshal.load(open(path, "rb"))`), when
                            the supervisor was spawned directly; the launcher is sent it
        script.sh           a `script:` body, mode 0700, run as `/bin/bash script.sh`
        shim.pid            "<pid> <start time>" of the supervisor
        cancel              the cancel marker
        output.log          stdout + stderr of the job, up to the site's cap
        work/ home/         the job's cwd and HOME, owned by the account it runs as

Modes: the root, jobs/ and each job's folder are 0711 (others may pass through, to reach
their own work and home, but not list); everything else the backend writes is private to the
portal's user, and work/ and home/ are 0700 of the job's account.

Who writes state.json: the backend (under the lock) while a job is pending/starting and for
transitions it alone can decide (cancel of a pending job, a failure to start, a dead
supervisor); the supervisor (`shim.py`) from "running" to the final state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from scheduling.backends import base
from scheduling.backends.base import BackendError, Job, JobState, SubmitRequest, decode_log
from scheduling.decisions.devices import DeviceTable
from scheduling.decisions.storage import JobStorage, Mount
from scheduling.decisions.types import NodeAllocation, Placement, QueuePolicy
from scheduling.spec import TaskSpec

KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,199}$")
FINAL = frozenset(s.value for s in JobState if s.finished)


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


class JobStore:
    """The files of every local job under `root`; see the module docstring for the layout."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(str(root))
        self.jobs_dir = os.path.join(self.root, "jobs")
        self.active_dir = os.path.join(self.root, "active")
        self.tmp_dir = os.path.join(self.root, "tmp")
        self.ended_dir = os.path.join(self.root, "ended")
        self.logs_dir = os.path.join(self.root, "logs")
        self._lock_path = os.path.join(self.root, "lock")
        self._drained_path = os.path.join(self.root, "drained.json")
        self._leases_path = os.path.join(self.root, "leases.json")
        self._seq_path = os.path.join(self.root, "seq")
        for d, mode in (
            (self.root, 0o711),
            (self.jobs_dir, 0o711),
            (self.active_dir, 0o700),
            (self.tmp_dir, 0o700),
            (self.ended_dir, 0o700),
            (self.logs_dir, 0o700),
        ):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, mode)  # makedirs' mode is masked by the umask; this is not
        # A job's request and allocation never change once written: parse each once.
        self._requests: dict[str, SubmitRequest] = {}
        self._allocs: dict[str, Placement] = {}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock

    def jobdir(self, key: str) -> str:
        return os.path.join(self.jobs_dir, key)

    def path(self, key: str, name: str) -> str:
        return os.path.join(self.jobs_dir, key, name)

    # -- a new job -----------------------------------------------------------------------

    def create(self, request: SubmitRequest) -> bool:
        """Store a new job atomically (call under the lock); False if the key exists.

        The whole job is built in a scratch dir and renamed into place: rename is atomic, so
        every reader sees a complete job or none, and a second submit of the key finds it and
        starts nothing. (A bare os.mkdir would be atomic too, but a crash right after it
        would leave a job dir without request.json.)
        """
        jobdir = self.jobdir(request.key)
        if os.path.lexists(jobdir):
            return False
        tmp = tempfile.mkdtemp(prefix=f"{request.key}.", dir=self.tmp_dir)
        try:
            self._write_new_job(tmp, request)
            os.rename(tmp, jobdir)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if os.path.lexists(jobdir):
                return False
            raise
        self._requests[request.key] = request
        touch(os.path.join(self.active_dir, request.key))
        return True

    def _write_new_job(self, jobdir: str, request: SubmitRequest) -> None:
        # Nobody sees this dir before it is renamed into place: plain writes suffice. One
        # file, request.json: a new file costs ~0.5 ms of kernel time here, and a job that
        # is still pending has no state.json (its state is read from its request).
        os.chmod(jobdir, 0o711)  # the job's account passes through to its work and home
        data = request_as_dict(request)
        data["pending"] = {"seq": self._next_seq(), "submitted_at": now_iso()}
        # 0600: the request holds the job's environment, secret_env values included.
        fd = os.open(os.path.join(jobdir, "request.json"), os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data))
        if request.spec.command is None and request.spec.script is not None:
            path = os.path.join(jobdir, "script.sh")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(request.spec.script)

    def _next_seq(self) -> int:
        # Called under the lock. Read and rewritten in place, at a fixed width: truncating
        # the file to rewrite it cost ~1 ms a job on ext4 here, this costs microseconds.
        fd = os.open(self._seq_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                seq = int(os.pread(fd, 64, 0).strip() or 0) + 1
            except ValueError:
                seq = 1
            os.pwrite(fd, b"%020d" % seq, 0)
        finally:
            os.close(fd)
        return seq

    # -- reading and writing a job's files ----------------------------------------------

    def read_state(self, key: str) -> dict[str, Any] | None:
        try:
            return read_json(self.path(key, "state.json"))
        except (FileNotFoundError, NotADirectoryError):
            pass
        try:  # pending since it was stored: its state is in its request
            return pending_state(read_json(self.path(key, "request.json")))
        except (FileNotFoundError, NotADirectoryError):
            pass
        try:  # its folder is gone (retention); the final state was kept
            return read_json(os.path.join(self.logs_dir, f"{key}.json"))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write_state(self, key: str, state: dict[str, Any]) -> None:
        write_json_atomic(self.path(key, "state.json"), state)

    def wait_started(self, keys: list[str], *, within_s: float) -> dict[str, dict[str, Any]]:
        """The states of those jobs that start (or end) within `within_s`, read every 2 ms.

        Only jobs placed on a node ("starting": their supervisor is spawned) are waited for;
        one still pending behind others will not start in a moment and is left to the poll.
        """
        deadline = time.monotonic() + within_s
        found: dict[str, dict[str, Any]] = {}
        seen: dict[str, tuple[int, int]] = {}  # key -> (inode, mtime) of the state last read
        while True:
            starting = []
            for key in keys:
                # state.json is replaced (a new inode) at every change: a stat says whether
                # there is anything new to read, for a fraction of a read's cost.
                try:
                    st = os.stat(self.path(key, "state.json"))
                except OSError:
                    st = None
                stamp = (st.st_ino, st.st_mtime_ns) if st is not None else None
                if stamp is not None and seen.get(key) == stamp:
                    starting.append(key)  # unchanged since it said "starting"
                    continue
                state = self.read_state(key)
                if state is None or state["state"] == "pending":
                    continue
                if state["state"] == "starting":
                    starting.append(key)
                    if stamp is not None:
                        seen[key] = stamp
                else:
                    found[key] = state
            if not starting or time.monotonic() >= deadline:
                return found
            keys = starting
            time.sleep(0.002)

    def job(self, key: str) -> Job:
        state = self.read_state(key)
        if state is None:  # cannot happen for a key this process just stored
            raise BackendError(f"local job {key!r} vanished")
        return job_from(key, state)

    def active_keys(self) -> list[str]:
        return os.listdir(self.active_dir)

    def retire(self, key: str) -> None:
        """The job has finished: it leaves the active set and the caches."""
        touch(os.path.join(self.ended_dir, key))
        unlink(os.path.join(self.active_dir, key))
        self._requests.pop(key, None)
        self._allocs.pop(key, None)

    def request(self, key: str) -> SubmitRequest:
        request = self._requests.get(key)
        if request is None:
            request = request_from(read_json(self.path(key, "request.json")))
            self._requests[key] = request
        return request

    def priority(self, key: str) -> int:
        """set_priority's number, else the request's own."""
        try:
            with open(self.path(key, "priority"), encoding="ascii") as f:
                return int(f.read().strip() or 0)
        except FileNotFoundError:
            return self.request(key).priority
        except (OSError, ValueError):
            return 0

    def set_priority(self, key: str, value: int) -> None:
        path = self.path(key, "priority")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(str(int(value)))
        os.replace(tmp, path)

    def remember_alloc(self, key: str, placement: Placement) -> list[dict[str, Any]]:
        """The placement as the job's state keeps it (`allocations`), cached here."""
        self._allocs[key] = placement
        return [dataclasses.asdict(a) for a in placement.allocations]

    def read_alloc(self, key: str, state: Mapping[str, Any]) -> Placement:
        """The job's placement, from its state (or alloc.json, where jobs started before
        the state held it kept it)."""
        if key in self._allocs:
            return self._allocs[key]
        allocations = state.get("allocations")
        if allocations is None:
            try:
                allocations = read_json(self.path(key, "alloc.json"))["allocations"]
            except FileNotFoundError:
                return Placement()
        self._allocs[key] = placement = Placement(
            tuple(
                NodeAllocation(
                    node=a["node"],
                    cpus=a["cpus"],
                    memory_mib=a["memory_mib"],
                    gpu_indices=tuple(a.get("gpu_indices") or ()),
                    whole_node=bool(a.get("whole_node")),
                )
                for a in allocations
            )
        )
        return placement

    def drained(self) -> dict[str, str]:
        try:
            return dict(read_json(self._drained_path))
        except FileNotFoundError:
            return {}

    def write_drained(self, drained: Mapping[str, str]) -> None:
        write_json_atomic(self._drained_path, dict(drained))

    def leases(self) -> dict[str, dict]:
        try:
            return dict(read_json(self._leases_path))
        except FileNotFoundError:
            return {}

    def write_leases(self, leases: Mapping[str, dict]) -> None:
        write_json_atomic(self._leases_path, dict(leases))

    def kept_log_path(self, key: str) -> str:
        """Where a job's output stays readable for good: the supervisor links its output.log
        here when it opens it, and the folder's removal leaves this name (`archive`)."""
        return os.path.join(self.logs_dir, f"{key}.log")

    def read_log(self, key: str, *, offset: int, limit: int) -> str:
        for path in (self.path(key, "output.log"), self.kept_log_path(key)):
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, offset))
                    return decode_log(f.read(max(0, limit)))
            except (FileNotFoundError, NotADirectoryError):
                continue
        return ""

    def final_states(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(key, final state) of every finished job: those with a folder, then the archived."""
        seen = set()
        for key in os.listdir(self.ended_dir):
            state = self.read_state(key)
            if state is not None:
                seen.add(key)
                yield key, state
        for name in os.listdir(self.logs_dir):
            key = name.removesuffix(".json")
            if name.endswith(".json") and key not in seen:
                with contextlib.suppress(FileNotFoundError, ValueError):
                    yield key, read_json(os.path.join(self.logs_dir, name))

    def expired(self, *, older_than: float) -> list[str]:
        """Finished jobs whose folder is still here and that ended before `older_than`."""
        keys = []
        for entry in os.scandir(self.ended_dir):
            try:
                if entry.stat().st_mtime < older_than:
                    keys.append(entry.name)
            except FileNotFoundError:
                continue
        return keys

    def ended(self) -> list[tuple[str, float]]:
        """(key, when it ended) of the finished jobs whose folder is still here."""
        found = []
        for entry in os.scandir(self.ended_dir):
            with contextlib.suppress(FileNotFoundError):
                found.append((entry.name, entry.stat().st_mtime))
        return found

    def owner(self, key: str) -> tuple[str, str]:
        """(user, project) of a job, from its stored request (not cached: it has ended)."""
        data = read_json(self.path(key, "request.json"))
        return str(data.get("user") or ""), str(data.get("project") or "")

    def archive(self, key: str) -> None:
        """Remove a finished job's folder; keep its log and final state under logs/."""
        jobdir = self.jobdir(key)
        with contextlib.suppress(FileNotFoundError):
            # Usually a second name of the same file already: then this changes nothing.
            os.replace(self.path(key, "output.log"), self.kept_log_path(key))
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path(key, "state.json"), os.path.join(self.logs_dir, f"{key}.json"))
        remove_tree(jobdir)
        unlink(os.path.join(self.ended_dir, key))


# -- the request and the job as files ----------------------------------------------------


def request_as_dict(request: SubmitRequest) -> dict[str, Any]:
    return {
        "key": request.key,
        "spec": request.spec.as_dict(),
        "type": request.type,
        "queue": dataclasses.asdict(request.queue),
        "project": request.project,
        "user": request.user,
        "extra": dict(request.extra),
        "priority": request.priority,
        "devices": request.devices.as_dict(),
        "storage": dataclasses.asdict(request.storage),
        "planned_runtime_s": request.planned_runtime_s,
    }


def pending_state(request: Mapping[str, Any]) -> dict[str, Any]:
    """The state of a job that has only its request.json (stored, not yet looked at by a
    scheduling pass that changed it)."""
    pending = request.get("pending") or {}
    return {
        "state": "pending",
        "reason": "waiting for the local scheduler",
        "exit_code": None,
        "nodes": [],
        "seq": pending.get("seq", 0),
        "submitted_at": pending.get("submitted_at"),
        "started_at": None,
        "ended_at": None,
    }


def request_from(data: Mapping[str, Any]) -> SubmitRequest:
    queue = dict(data["queue"])
    queue["task_types"] = tuple(queue.get("task_types") or ())
    return SubmitRequest(
        key=data["key"],
        spec=TaskSpec.from_dict(data["spec"]),
        type=data["type"],
        queue=QueuePolicy(**queue),
        project=data["project"],
        user=data["user"],
        extra=dict(data.get("extra") or {}),
        priority=int(data.get("priority") or 0),
        devices=DeviceTable.from_dict(data.get("devices")),
        storage=job_storage_from(data.get("storage") or {}),
        planned_runtime_s=data.get("planned_runtime_s"),
    )


def job_storage_from(data: Mapping[str, Any]) -> JobStorage:
    mounts = tuple(Mount(**mount) for mount in data.get("mounts") or ())
    return JobStorage(mounts=mounts, workdir=data.get("workdir") or "")


def job_from(key: str, state: Mapping[str, Any]) -> Job:
    raw = state.get("state", "unknown")
    # "starting": placed and its supervisor spawned, the command not yet running.
    job_state = JobState.PENDING if raw == "starting" else JobState(raw)
    return Job(
        backend_id=key,
        state=job_state,
        reason=state.get("reason", ""),
        exit_code=state.get("exit_code"),
        nodes=tuple(state.get("nodes") or ()),
        started_at=_parse_time(state.get("started_at")),
        ended_at=_parse_time(state.get("ended_at")),
        pull=_image_pull(state.get("image_pull")),
    )


def _image_pull(pull: Mapping[str, Any] | None) -> base.ImagePull | None:  # pulls.py
    if not pull:
        return None
    done = pull["bytes"] if pull["finished"] else pull["done"]
    return base.ImagePull(
        int(done), pull.get("total"), float(pull["seconds"]), bool(pull["finished"])
    )


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json_atomic(path: str, data: Any) -> None:
    # tmp + os.replace: a reader in another process sees the old file or the new, never half.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data))  # C-encoded at once: json.dump writes piece by piece
    os.replace(tmp, path)


def remove_tree(path: str) -> None:
    """Remove a folder a job wrote, whatever modes it left on its own folders.

    Folders are made writable first (a job may leave one 0500); symlinks are never followed,
    so nothing outside the folder is touched.
    """
    for top, dirs, _files in os.walk(path, followlinks=False):
        for name in dirs:
            sub = os.path.join(top, name)
            if not os.path.islink(sub):
                with contextlib.suppress(OSError):
                    os.chmod(sub, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def touch(path: str) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
