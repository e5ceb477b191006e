"""The local backend: real processes on this machine, over virtual nodes.

Capacity is bookkept (a node's cpus/memory/GPUs come from the inventory and are handed out by
the same `place()` the simulator uses); the processes really run. All state lives on disk
under `root/`, so any worker process can submit, poll and cancel, and a worker restart loses
nothing:

    root/lock               flock'ed around every scheduling pass and state transition
    root/seq                submit counter (FIFO order among equal priorities)
    root/drained.json       {node: reason} of drained virtual nodes
    root/active/<key>       one empty file per job not yet finished (keeps a pass O(active))
    root/jobs/<key>/        one job; its key is its backend id
        request.json        the SubmitRequest (spec via TaskSpec.as_dict())
        state.json          pending | starting | running | final state (atomic tmp+replace)
        priority            set_priority's number (higher starts first)
        alloc.json          the Placement, once started
        launch.marshal      argv / env / cwd / limits the supervisor runs with (marshal: see
                            local_shim; read it with `marshal.load(open(path, "rb"))`)
        script.sh           a `script:` body, mode 0700, run as `/bin/bash script.sh`
        shim.pid            "<pid> <start time>" of the supervisor
        cancel              the cancel marker
        output.log          stdout + stderr of the job
        work/ home/ tmp/    the job's cwd, HOME and TMPDIR

Who writes state.json: the backend (under the lock) while a job is pending/starting and for
transitions it alone can decide (cancel of a pending job, a failure to start, a dead
supervisor); the supervisor (`local_shim.py`) from "running" to the final state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import marshal
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.utils.module_loading import import_string

from scheduling.backends.base import BackendError, Job, JobState, SubmitRequest
from scheduling.backends.local_shim import BWRAP_MISSING, DEFAULT_GRACE_S, proc_start_time
from scheduling.decisions.place import free_view, place
from scheduling.decisions.types import NodeAllocation, NodeView, Placement, QueuePolicy
from scheduling.spec import SANDBOXED_TYPES, TaskSpec

__all__ = ["BWRAP_MISSING", "KILL_GRACE_S", "LocalBackend", "SUPERVISOR_DIED"]

SHIM_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "local_shim.py")
# Seconds between SIGTERM and SIGKILL on timeout/cancel; a request may set
# extra["kill_grace_s"].
KILL_GRACE_S = DEFAULT_GRACE_S
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SUPERVISOR_DIED = "the local supervisor died"

_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,199}$")
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Set by the backend from the allocation; a descriptor's env may not override them.
_RESERVED_ENV = ("SWITCHYARD_TASK_KEY", "SWITCHYARD_NODES", "CUDA_VISIBLE_DEVICES")

_FINAL = frozenset(s.value for s in JobState if s.finished)

# The read-only system a sandboxed job sees. Password hashes are masked even from root.
SANDBOX_SYSTEM_BINDS = (
    "--ro-bind", "/usr", "/usr",
    "--ro-bind-try", "/bin", "/bin",
    "--ro-bind-try", "/sbin", "/sbin",
    "--ro-bind-try", "/lib", "/lib",
    "--ro-bind-try", "/lib64", "/lib64",
    "--ro-bind", "/etc", "/etc",
    "--ro-bind-try", "/dev/null", "/etc/shadow",
    "--ro-bind-try", "/dev/null", "/etc/gshadow",
)  # fmt: skip


def sandbox_argv(
    bwrap: str, *, writable: Sequence[str], readonly: Sequence[str] = (), hide: str, chdir: str
) -> list[str]:
    """The bubblewrap prefix for a sandboxed command (append the command's argv to it).

    New namespaces (so no network: only a loopback that is down), only the read-only system,
    a private /tmp, `hide` covered by an empty tmpfs (other jobs' folders are not this job's
    to read), and then this job's own folders brought back.
    """
    binds: list[str] = []
    for path in writable:
        binds += ["--bind", path, path]
    for path in readonly:
        binds += ["--ro-bind", path, path]
    return [
        bwrap,
        "--unshare-all",  # new user/ipc/pid/net/uts/cgroup namespaces: no network
        "--die-with-parent",
        "--new-session",
        # Only the system, read-only: the portal's code, settings, database and other users'
        # files (/work, /root, /home, /var, /srv) are not there at all.
        *SANDBOX_SYSTEM_BINDS,
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--tmpfs", hide,
        *binds,
        "--chdir", chdir,
        "--",
    ]  # fmt: skip


NodeSource = Callable[[str], "Sequence[NodeView] | Mapping[str, Sequence[NodeView]]"]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@dataclasses.dataclass(frozen=True, slots=True)
class _Pending:
    priority: int
    seq: int
    key: str
    request: SubmitRequest


class LocalBackend:
    """Runs jobs as processes on this machine; see the module docstring for the layout."""

    def __init__(
        self,
        alias: str,
        *,
        root: str,
        bwrap: str = "bwrap",
        node_source: str | NodeSource = "scheduling.selectors.node_views_for_backend",
        python: str = sys.executable,
        kill_grace_s: float = KILL_GRACE_S,
        inventory_ttl_s: float = 0.0,
    ) -> None:
        self.alias = alias
        self.root = os.path.abspath(str(root))
        self.bwrap = bwrap
        self.python = python
        self.kill_grace_s = kill_grace_s
        self._node_source = node_source
        # Reading the inventory was a sixth of a dispatch; nodes change rarely (admin edits).
        self.inventory_ttl_s = inventory_ttl_s
        self._inventory_cache: tuple[float, dict[str, tuple[NodeView, ...]]] | None = None
        self._jobs_dir = os.path.join(self.root, "jobs")
        self._active_dir = os.path.join(self.root, "active")
        self._tmp_dir = os.path.join(self.root, "tmp")
        self._lock_path = os.path.join(self.root, "lock")
        self._drained_path = os.path.join(self.root, "drained.json")
        self._seq_path = os.path.join(self.root, "seq")
        for d in (self._jobs_dir, self._active_dir, self._tmp_dir):
            os.makedirs(d, exist_ok=True)
        # Supervisors this process spawned: polled so that they do not linger as zombies.
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        # A job's request and allocation never change once written: parse each once.
        self._requests: dict[str, SubmitRequest] = {}
        self._allocs: dict[str, Placement] = {}

    # -- protocol ----------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> Job:
        _validate(request)
        existing = self.find(request.key)
        if existing is not None:
            return existing
        jobdir = self._jobdir(request.key)
        with self._locked():
            if os.path.lexists(jobdir):  # submitted meanwhile by another process
                return self._job(request.key)
            # Build the whole job in a scratch dir and rename it into place: rename is atomic,
            # so every reader sees a complete job or none, and a second submit of the key
            # finds it and starts nothing. (A bare os.mkdir would be atomic too, but a crash
            # right after it would leave a job dir without request.json.)
            tmp = tempfile.mkdtemp(prefix=f"{request.key}.", dir=self._tmp_dir)
            try:
                self._write_new_job(tmp, request)
                os.rename(tmp, jobdir)
                self._requests[request.key] = request
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                if os.path.lexists(jobdir):
                    return self._job(request.key)
                raise
            _touch(os.path.join(self._active_dir, request.key))
            self._schedule_locked()
        return self._job(request.key)

    def find(self, key: str) -> Job | None:
        if not _KEY_RE.match(key):
            return None
        state = self._read_state(key)
        return None if state is None else _job_from(key, state)

    def cancel(self, backend_id: str) -> None:
        if not _KEY_RE.match(backend_id):
            return
        jobdir = self._jobdir(backend_id)
        with self._locked():
            state = self._read_state(backend_id)
            if state is None or state["state"] in _FINAL:
                return  # unknown or finished: nothing to do
            if state["state"] == "pending":
                # Nothing runs yet; the lock keeps a pass from starting it meanwhile.
                state.update(state="cancelled", reason="cancelled before it started")
                state["ended_at"] = _now_iso()
                self._write_state(backend_id, state)
                self._retire(backend_id)
                return
            # starting/running: the marker first, then look for the child's group. The
            # supervisor publishes the group and only then checks the marker, so one of the
            # two always sees the other: a cancel is never lost between spawn and exec.
            _touch(os.path.join(jobdir, "cancel"))
        state = self._read_state(backend_id) or {}
        self._signal_child(state, signal.SIGTERM)
        # SIGKILL after the grace period is the supervisor's job: it sees the marker.

    def poll(self, backend_ids: list[str]) -> dict[str, Job]:
        # Freed capacity is reused here, and dead supervisors are found here.
        self._schedule()
        result: dict[str, Job] = {}
        for backend_id in backend_ids:
            state = self._read_state(backend_id) if _KEY_RE.match(backend_id) else None
            if state is None:
                result[backend_id] = Job(
                    backend_id, JobState.UNKNOWN, reason="the local backend has no such job"
                )
            else:
                result[backend_id] = _job_from(backend_id, state)
        return result

    def nodes(self) -> list[NodeView]:
        with self._locked():
            allocations, _, _ = self._live_allocations()
        drained = self._drained()
        views: list[NodeView] = []
        for pool_nodes in self._inventory().values():
            for node in pool_nodes:
                views.append(self._view(node, allocations, drained))
        return views

    def set_priority(self, backend_id: str, value: int) -> None:
        if not _KEY_RE.match(backend_id) or not os.path.isdir(self._jobdir(backend_id)):
            raise BackendError(f"the local backend has no job {backend_id!r}")
        path = os.path.join(self._jobdir(backend_id), "priority")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(str(int(value)))
        os.replace(tmp, path)

    def drain(self, node: str, reason: str) -> None:
        with self._locked():
            drained = self._drained()
            drained[node] = reason
            write_json_atomic(self._drained_path, drained)

    def resume(self, node: str) -> None:
        with self._locked():
            drained = self._drained()
            if drained.pop(node, None) is not None:
                write_json_atomic(self._drained_path, drained)
            self._schedule_locked()  # what waited for this node may start now

    def log(self, backend_id: str, *, offset: int = 0, limit: int = 1 << 20) -> str:
        if not _KEY_RE.match(backend_id):
            return ""
        try:
            with open(os.path.join(self._jobdir(backend_id), "output.log"), "rb") as f:
                f.seek(max(0, offset))
                return f.read(max(0, limit)).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    # -- scheduling pass ---------------------------------------------------------------

    def _schedule(self) -> None:
        with self._locked():
            self._schedule_locked()

    def _schedule_locked(self) -> None:
        """Start the pending jobs that fit, in priority then submit order (with backfill)."""
        allocations, per_queue, waiting = self._live_allocations()
        pending = self._pending(waiting)
        if not pending:
            return
        inventory = self._inventory()
        drained = self._drained()
        for job in sorted(pending, key=lambda p: (-p.priority, p.seq)):
            request = job.request
            queue = request.queue
            if request.type in SANDBOXED_TYPES and shutil.which(self.bwrap) is None:
                # Never fall back to running an agent/sandbox task without its sandbox.
                self._fail_unstarted(job.key, BWRAP_MISSING)
                continue
            pool_nodes = inventory.get(queue.pool, inventory.get("", ()))
            # Could it ever fit, on this pool emptied and every node back up?
            ideal = [free_view(dataclasses.replace(n, available=True), ()) for n in pool_nodes]
            if place(request.spec, queue, ideal) is None:
                self._fail_unstarted(job.key, _never_fits(request, pool_nodes))
                continue
            if queue.max_concurrency is not None and per_queue[queue.name] >= queue.max_concurrency:
                self._set_waiting(
                    job.key, f"queue {queue.name} runs its maximum of {queue.max_concurrency} jobs"
                )
                continue
            # place() applies the queue's policy (whole-node, pack, CPU oversubscription) to
            # these queue-independent free views.
            views = [self._view(n, allocations, drained) for n in pool_nodes]
            placement = place(request.spec, queue, views)
            if placement is None:
                self._set_waiting(job.key, _waiting_reason(request, drained, pool_nodes))
                continue
            if self._start(job.key, request, placement):
                for a in placement.allocations:
                    allocations[a.node].append(a)
                per_queue[queue.name] += 1

    def _live_allocations(
        self,
    ) -> tuple[dict[str, list[NodeAllocation]], Counter[str], dict[str, dict[str, Any]]]:
        """Allocations of starting/running jobs by node, running jobs per queue, and the
        states of pending jobs; retires what has finished and fails dead supervisors."""
        for key, child in list(self._children.items()):
            if child.poll() is not None:  # reaps it
                del self._children[key]
        allocations: dict[str, list[NodeAllocation]] = defaultdict(list)
        per_queue: Counter[str] = Counter()
        waiting: dict[str, dict[str, Any]] = {}
        for key in os.listdir(self._active_dir):
            state = self._read_state(key)
            if state is None or state["state"] in _FINAL:
                self._retire(key)
                continue
            if state["state"] == "pending":
                waiting[key] = state
                continue
            if not self._supervisor_alive(key, state):
                # Re-read: it may have written its final state just before exiting.
                state = self._read_state(key) or state
                if state["state"] not in _FINAL:
                    self._signal_child(state, signal.SIGKILL)  # leave no orphan running
                    state.update(
                        state="failed",
                        reason=f"{SUPERVISOR_DIED} (killed, or the machine restarted)",
                        ended_at=_now_iso(),
                    )
                    self._write_state(key, state)
                self._retire(key)
                continue
            for a in self._read_alloc(key).allocations:
                allocations[a.node].append(a)
            per_queue[state.get("queue", "")] += 1
        return allocations, per_queue, waiting

    def _pending(self, waiting: Mapping[str, Mapping[str, Any]]) -> list[_Pending]:
        pending = []
        for key, state in waiting.items():
            try:
                with open(self._path(key, "priority"), encoding="ascii") as f:
                    priority = int(f.read().strip() or 0)
            except (OSError, ValueError):
                priority = 0
            request = self._requests.get(key)
            if request is None:
                request = _request_from(read_json(self._path(key, "request.json")))
                self._requests[key] = request
            pending.append(_Pending(priority, int(state.get("seq", 0)), key, request))
        return pending

    def _view(
        self,
        node: NodeView,
        allocations: Mapping[str, Sequence[NodeAllocation]],
        drained: Mapping[str, str],
    ) -> NodeView:
        if node.name in drained:
            node = dataclasses.replace(node, available=False)
        return free_view(node, allocations.get(node.name, ()))

    def _inventory(self) -> dict[str, tuple[NodeView, ...]]:
        """The nodes by pool name; "" holds nodes whose pool the source does not say.

        node_source may return a list (every node serves every queue of this backend) or a
        mapping pool name -> nodes (a queue only uses its own pool's nodes).
        """
        now = time.monotonic()
        if self._inventory_cache and now - self._inventory_cache[0] < self.inventory_ttl_s:
            return self._inventory_cache[1]
        source = self._node_source
        if isinstance(source, str):
            source = import_string(source)  # lazily: the selector imports the ORM
            self._node_source = source
        nodes = source(self.alias)
        if isinstance(nodes, Mapping):
            inventory = {pool: tuple(ns) for pool, ns in nodes.items()}
        else:
            inventory = {"": tuple(nodes)}
        self._inventory_cache = (now, inventory)
        return inventory

    # -- starting a job ----------------------------------------------------------------

    def _start(self, key: str, request: SubmitRequest, placement: Placement) -> bool:
        sandboxed = request.type in SANDBOXED_TYPES
        bwrap = shutil.which(self.bwrap) if sandboxed else None
        if sandboxed and bwrap is None:
            # Never fall back to running an agent/sandbox task without its sandbox.
            self._fail_unstarted(key, BWRAP_MISSING)
            return False
        jobdir = self._jobdir(key)
        # alloc.json and launch.marshal are read only once state.json says "starting", which
        # is written after them (under the lock): plain writes suffice.
        with open(self._path(key, "alloc.json"), "w", encoding="utf-8") as f:
            json.dump({"allocations": [dataclasses.asdict(a) for a in placement.allocations]}, f)
        self._allocs[key] = placement
        state = self._read_state(key) or {}
        state.update(
            state="starting",
            reason=f"starting on {', '.join(placement.nodes)}",
            nodes=list(placement.nodes),
            queue=request.queue.name,
        )
        plan = self._launch_plan(key, request, placement, bwrap)
        plan["state"] = state  # the supervisor continues from this state
        # marshal, not JSON: it is built into the interpreter, while importing json would
        # cost the supervisor ~30 ms of start-up here. Read it with marshal.load().
        with open(self._path(key, "launch.marshal"), "wb") as f:
            marshal.dump(plan, f, 4)
        self._write_state(key, state)
        try:
            child = subprocess.Popen(
                [self.python, "-I", "-S", SHIM_PATH, jobdir],
                cwd=jobdir,
                env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},  # never the portal's environment
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,  # survives the worker; not hit by its signals
            )
        except OSError as exc:
            self._fail_unstarted(key, f"could not start the local supervisor: {exc}")
            return False
        self._children[key] = child
        with open(self._path(key, "shim.pid"), "w", encoding="ascii") as f:
            f.write(f"{child.pid} {proc_start_time(child.pid) or 0}")
        return True

    def _launch_plan(
        self, key: str, request: SubmitRequest, placement: Placement, bwrap: str | None
    ) -> dict[str, Any]:
        spec = request.spec
        jobdir = self._jobdir(key)
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
        env.update((k, v) for k, v in spec.env if k not in _RESERVED_ENV)
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
                    hide=self.root,
                    chdir=work,
                ),
                *argv,
            ]
        walltime = spec.walltime_s
        try:
            grace = float(request.extra.get("kill_grace_s", self.kill_grace_s))
        except ValueError:
            grace = self.kill_grace_s
        return {
            "argv": argv,
            "env": env,
            "cwd": work,
            "mkdirs": [work, home, tmp],
            "walltime_s": walltime,
            "grace_s": grace,
            "sandboxed": sandboxed,
            "bwrap": bwrap,
        }

    def _fail_unstarted(self, key: str, reason: str) -> None:
        state = self._read_state(key) or {}
        state.update(state="failed", reason=reason, ended_at=_now_iso())
        self._write_state(key, state)
        self._retire(key)

    def _set_waiting(self, key: str, reason: str) -> None:
        state = self._read_state(key) or {}
        if state.get("reason") != reason:  # no write per pass when nothing changed
            state["reason"] = reason
            self._write_state(key, state)

    # -- processes ---------------------------------------------------------------------

    def _supervisor_alive(self, key: str, state: dict[str, Any]) -> bool:
        pid, start = state.get("shim_pid"), state.get("shim_start")
        if pid is None:
            try:
                with open(self._path(key, "shim.pid"), encoding="ascii") as f:
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

    @staticmethod
    def _signal_child(state: Mapping[str, Any], signo: int) -> None:
        pid, start = state.get("child_pid"), state.get("child_start")
        if pid is None or start is None or proc_start_time(pid) != start:
            return  # not started, or gone (a pid that may since belong to someone else)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(state.get("child_pgid", pid), signo)
        # A sandbox's processes live in their own session under bwrap's init: killing that
        # init ends the whole pid namespace (see local_shim.Shim.spawn for why we do this).
        box_pid, box_start = state.get("sandbox_pid"), state.get("sandbox_start")
        if box_pid and box_start is not None and proc_start_time(box_pid) == box_start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(box_pid, signal.SIGKILL)

    # -- files -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _job(self, key: str) -> Job:
        state = self._read_state(key)
        if state is None:  # cannot happen for a key this process just stored
            raise BackendError(f"local job {key!r} vanished")
        return _job_from(key, state)

    def _jobdir(self, key: str) -> str:
        return os.path.join(self._jobs_dir, key)

    def _path(self, key: str, name: str) -> str:
        return os.path.join(self._jobs_dir, key, name)

    def _read_state(self, key: str) -> dict[str, Any] | None:
        try:
            return read_json(self._path(key, "state.json"))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _write_state(self, key: str, state: dict[str, Any]) -> None:
        write_json_atomic(self._path(key, "state.json"), state)

    def _retire(self, key: str) -> None:
        """The job has finished: it leaves the active set and the caches."""
        _unlink(os.path.join(self._active_dir, key))
        self._requests.pop(key, None)
        self._allocs.pop(key, None)

    def _read_alloc(self, key: str) -> Placement:
        if key in self._allocs:
            return self._allocs[key]
        try:
            data = read_json(self._path(key, "alloc.json"))
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
                for a in data["allocations"]
            )
        )
        return placement

    def _drained(self) -> dict[str, str]:
        try:
            return dict(read_json(self._drained_path))
        except FileNotFoundError:
            return {}

    def _next_seq(self) -> int:
        # Called under the lock: a plain read-increment-write is safe.
        try:
            with open(self._seq_path, encoding="ascii") as f:
                seq = int(f.read().strip() or 0) + 1
        except (FileNotFoundError, ValueError):
            seq = 1
        with open(self._seq_path, "w", encoding="ascii") as f:
            f.write(str(seq))
        return seq

    def _write_new_job(self, jobdir: str, request: SubmitRequest) -> None:
        # Nobody sees this dir before it is renamed into place: plain writes suffice.
        os.chmod(jobdir, 0o755)  # mkdtemp's 0700 would hide it from a sandboxed child
        with open(os.path.join(jobdir, "request.json"), "w", encoding="utf-8") as f:
            json.dump(_request_as_dict(request), f)
        if request.spec.command is None and request.spec.script is not None:
            path = os.path.join(jobdir, "script.sh")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(request.spec.script)
        now = _now_iso()
        with open(os.path.join(jobdir, "state.json"), "w", encoding="utf-8") as f:
            state = {
                "state": "pending",
                "reason": "waiting for the local scheduler",
                "exit_code": None,
                "nodes": [],
                "seq": self._next_seq(),
                "submitted_at": now,
                "started_at": None,
                "ended_at": None,
            }
            json.dump(state, f)


# -- helpers ---------------------------------------------------------------------------


def _validate(request: SubmitRequest) -> None:
    """Refuse what cannot be run safely; the descriptor parser should have caught it."""
    if not _KEY_RE.match(request.key):
        raise BackendError(f"key: must match [a-z0-9][a-z0-9-]*, got {request.key!r}")
    spec = request.spec
    if (spec.command is None) == (spec.script is None):
        raise BackendError("exactly one of command and script is required")
    if spec.command is not None and (not spec.command or any("\0" in a for a in spec.command)):
        raise BackendError("command: must be a non-empty list of strings without NUL")
    if spec.script is not None and "\0" in spec.script:
        raise BackendError("script: must not contain NUL")
    for name, value in spec.env:
        if not _ENV_NAME_RE.match(name):
            raise BackendError(f"env: name {name!r} must match ^[A-Z_][A-Z0-9_]*$")
        if "\0" in value:
            raise BackendError(f"env.{name}: must not contain NUL")


def _request_as_dict(request: SubmitRequest) -> dict[str, Any]:
    return {
        "key": request.key,
        "spec": request.spec.as_dict(),
        "type": request.type,
        "queue": dataclasses.asdict(request.queue),
        "project": request.project,
        "user": request.user,
        "extra": dict(request.extra),
    }


def _request_from(data: Mapping[str, Any]) -> SubmitRequest:
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
    )


def _job_from(key: str, state: Mapping[str, Any]) -> Job:
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
    )


def _ask(request: SubmitRequest) -> str:
    r = request.spec.resources
    parts = [f"cpus={r.cpus}", f"memory={r.memory_mib} MiB"]
    if r.gpus:
        parts.append(f"gpus={r.gpus}" + (f" ({r.gpu_type})" if r.gpu_type else ""))
    if r.nodes:
        parts.append(f"nodes={r.nodes}")
    if request.queue.allocation == "whole-node":
        parts.append("whole nodes")
    return ", ".join(parts)


def _never_fits(request: SubmitRequest, nodes: Sequence[NodeView]) -> str:
    pool = request.queue.pool
    if not nodes:
        return f"pool {pool} has no nodes on local backend: nothing can run there"
    biggest = max(nodes, key=lambda n: (n.gpus, n.cpus, n.memory_mib))
    return (
        f"no node of pool {pool} can ever hold this request ({_ask(request)}); "
        f"its largest node has {biggest.cpus} cpus, {biggest.memory_mib} MiB, "
        f"{biggest.gpus} GPUs"
    )


def _waiting_reason(
    request: SubmitRequest, drained: Mapping[str, str], nodes: Sequence[NodeView]
) -> str:
    reason = f"waiting for resources in pool {request.queue.pool} ({_ask(request)})"
    down = [n.name for n in nodes if n.name in drained or not n.available]
    if down:
        reason += f"; drained or down: {', '.join(sorted(down))}"
    return reason


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json_atomic(path: str, data: Any) -> None:
    # tmp + os.replace: a reader in another process sees the old file or the new, never half.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _touch(path: str) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
