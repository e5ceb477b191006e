"""The local backend: real processes on this machine, over virtual nodes.

Capacity is bookkept (a node's cpus/memory/GPUs come from the inventory and are handed out by
the scheduling pass the simulator also runs, `scheduling/decisions/schedule.py`); the
processes really run. All state lives on disk (`jobstore.py`), so any worker process can
submit, poll and cancel, and a worker restart loses nothing. `launch.py` starts a job's
supervisor (`shim.py`), which runs the command and writes its end.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from django.utils.module_loading import import_string

from scheduling.backends.base import (
    Backend,
    BackendError,
    Job,
    JobState,
    LeaseView,
    NodeHealth,
    Run,
    SubmitRequest,
)
from scheduling.backends.local import cgroup, launch, limits, pulls, warm
from scheduling.backends.local import images as local_images
from scheduling.backends.local import usage as job_usage
from scheduling.backends.local.crosspool import BorrowingSource, LocalCrossPool
from scheduling.backends.local.folders import FolderTotals
from scheduling.backends.local.jobstore import (
    FINAL,
    KEY_RE,
    JobStore,
    job_from,
    now_iso,
    touch,
)
from scheduling.backends.local.prepull import LocalImages
from scheduling.backends.local.sessions import LocalSessions
from scheduling.backends.local.shim import BWRAP_MISSING, DEFAULT_GRACE_S
from scheduling.decisions.lend import Loan, lend
from scheduling.decisions.place import free_view
from scheduling.decisions.schedule import Fail, Start, WaitingJob
from scheduling.decisions.types import NodeAllocation, NodeView
from scheduling.host import pid_max as host_pid_max

# Seconds between SIGTERM and SIGKILL on timeout/cancel; a request may set
# extra["kill_grace_s"].
KILL_GRACE_S = DEFAULT_GRACE_S
SUPERVISOR_DIED = "the local supervisor died"

NodeSource = Callable[[str], "Sequence[NodeView] | Mapping[str, Sequence[NodeView]]"]


class LocalBackend(LocalSessions, LocalImages, LocalCrossPool, Backend):
    """Runs jobs as processes on this machine; see jobstore.py for the files."""

    # The engine hands this backend the portal's node inventory (engine/registry.py).
    uses_inventory = True
    # Its jobs are processes of this machine: they share its process ids (scheduling/host.py).
    runs_on_this_host = True
    shows_starts = True  # a job's start shows at once in its folder (engine/starts.py)
    backfills_across_pools = True  # idle cores lent across pools (crosspool.py)

    def __init__(
        self,
        alias: str,
        *,
        root: str,
        bwrap: str = "bwrap",
        slirp4netns: str = "slirp4netns",
        node_source: NodeSource | None = None,
        borrowing_source: BorrowingSource | None = None,
        python: str = sys.executable,
        launcher: bool = True,
        kill_grace_s: float = KILL_GRACE_S,
        inventory_ttl_s: float = 0.0,
        job_account: str = "switchyard-job",
        max_processes: int = limits.DEFAULT_MAX_PROCESSES,
        max_output_bytes: int = limits.DEFAULT_MAX_OUTPUT_BYTES,
        max_disk_bytes: int = limits.DEFAULT_MAX_DISK_BYTES,
        retention_s: float = 7 * 86400,
        max_folder_bytes_per_user: int | None = None,
        max_folder_bytes_per_project: int | None = None,
        cgroups: str = "auto",
        health_probe: str | Callable[..., dict[str, NodeHealth]] = (
            "scheduling.backends.local.health.host_probe"
        ),
    ) -> None:
        self.alias = alias
        self.store = JobStore(root)
        self.root = self.store.root
        self.bwrap = bwrap
        self.slirp4netns = slirp4netns  # batch jobs' network (jobnet.py)
        self.python = python
        # Supervisors are forked by the root's resident launcher (launcher.py); off, each
        # is an interpreter of its own (slower to start; what the launcher falls back to).
        self.launcher = launcher
        self.kill_grace_s = kill_grace_s
        # Jobs of researchers without a cluster account of their own run as this account.
        self.job_account = job_account
        self.limits = limits.JobLimits(max_processes, max_output_bytes, max_disk_bytes)
        # Where each job's control group goes (cgroup.py: memory and CPUs held to its
        # request by the kernel), or why jobs have none and the watchdog alone bounds them.
        self.cgroups, self.cgroups_off = cgroup.locate(cgroups, self.root)
        # A folder named for them that cannot hold them: jobs fail saying so, rather than
        # run without the limits the site asked for.
        self.cgroups_refused = (
            f"SWITCHYARD_JOB_CGROUP: {self.cgroups_off}"
            if self.cgroups is None and cgroups not in ("auto", "off")
            else ""
        )
        # The machine's process ids, which the jobs of a queue share (decisions/processes.py).
        self.pid_max = host_pid_max()
        # Ended jobs' folders are removed this long after they end (their log is kept).
        self.retention_s = retention_s
        # ...and sooner, oldest first, while a user's or a project's ended folders together
        # hold more than these (None or 0: no total).
        self.folder_totals = FolderTotals(
            per_user=max_folder_bytes_per_user, per_project=max_folder_bytes_per_project
        )
        self._health_probe = (
            import_string(health_probe) if isinstance(health_probe, str) else health_probe
        )
        self._node_source = node_source or (lambda _alias: [])
        self._borrowing_source = borrowing_source or (lambda _alias: ())
        self._borrowing_cache = None
        # Reading the inventory was a sixth of a dispatch; nodes change rarely (admin edits).
        self.inventory_ttl_s = inventory_ttl_s
        self._inventory_cache: tuple[float, dict[str, tuple[NodeView, ...]]] | None = None
        # Supervisors this process spawned: polled so that they do not linger as zombies.
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        # Live sandboxes (sessions.py): each running one's socket, and the warm sandbox a
        # claim in progress takes over (key -> warm key).
        self._sockets: dict[str, str] = {}
        self._claims: dict[str, str] = {}

    # -- protocol ----------------------------------------------------------------------

    def submit_many(self, requests: list[SubmitRequest]) -> list[Job | BackendError]:
        """Many jobs in one scheduling pass, under one lock."""
        out: list[Job | BackendError | None] = [None] * len(requests)
        fresh = []
        for at, request in enumerate(requests):
            try:
                launch.validate(request)
            except BackendError as exc:
                out[at] = exc
                continue
            out[at] = self.find(request.key)
            if out[at] is None:
                fresh.append(at)
        if fresh:
            # Stored at once: a job whose image is not here waits for it, pending, while a
            # puller of its own fetches it (pulls.py); nothing here waits for a registry.
            now = time.time()
            with self.store.locked():
                for at in fresh:
                    self._create(requests[at], now)
                self._schedule_locked()
            for at in fresh:
                out[at] = self.store.job(requests[at].key)
        if None in out:  # cannot happen: every fresh slot was filled just above
            raise BackendError("a local job vanished while it was submitted")
        return [item for item in out if item is not None]

    def _create(self, request: SubmitRequest, now: float) -> None:
        """Store a new job (under the lock), with its image's pull when it has one; a job
        another process made meanwhile is left as it is."""
        pull = pulls.begin(self.root, request, now)
        if self.store.create(request) and pull is not None:
            state = self.store.read_state(request.key) or {}
            state["image_pull"] = pull
            if not pull["finished"]:
                state["reason"] = pulls.PULLING
            self.store.write_state(request.key, state)

    def find(self, key: str) -> Job | None:
        if not KEY_RE.match(key):
            return None
        state = self.store.read_state(key)
        return None if state is None else job_from(key, state)

    def started(self, backend_ids: list[str], *, within_s: float) -> dict[str, Job]:
        """Those of these jobs, just submitted, that start (or end) within `within_s`."""
        keys = [key for key in backend_ids if KEY_RE.match(key)]
        found = self.store.wait_started(keys, within_s=within_s)
        return {key: job_from(key, state) for key, state in found.items()}

    def cancel(self, backend_id: str) -> None:
        if not KEY_RE.match(backend_id):
            return
        with self.store.locked():
            state = self.store.read_state(backend_id)
            if state is None or state["state"] in FINAL:
                return  # unknown or finished: nothing to do
            if state["state"] == "pending":
                # Nothing runs yet; the lock keeps a pass from starting it meanwhile.
                state.update(
                    state="cancelled", reason="cancelled before it started", ended_at=now_iso()
                )
                self.store.write_state(backend_id, state)
                self.store.retire(backend_id)
                return
            # starting/running: the supervisor looks for the marker before it starts the
            # command and every quarter second after, then stops the job: SIGTERM to its
            # processes, SIGKILL to the whole sandbox after the grace period.
            # A warm sandbox handed to a session is that session's now (warm.py).
            touch(self.store.path(state.get("claimed_by") or backend_id, "cancel"))

    def poll(self, backend_ids: list[str]) -> dict[str, Job]:
        # Freed capacity is reused here, and dead supervisors are found here.
        with self.store.locked():
            known = self._schedule_locked(find_dead=True)
        result: dict[str, Job] = {}
        for backend_id in backend_ids:
            state = known.get(backend_id)
            if state is None and KEY_RE.match(backend_id):
                state = self.store.read_state(backend_id)
            if state is None:
                result[backend_id] = Job(
                    backend_id, JobState.UNKNOWN, reason="the local backend has no such job"
                )
            else:
                result[backend_id] = job_from(backend_id, state)
        return result

    def nodes(self) -> list[NodeView]:
        with self.store.locked():
            allocations, _, _ = self._live_allocations()
        drained = self.store.drained()
        views: list[NodeView] = []
        for pool_nodes in self._inventory().values():
            for node in pool_nodes:
                if node.name in drained:
                    node = dataclasses.replace(node, available=False)
                views.append(free_view(node, allocations.get(node.name, ())))
        return views

    def set_priority(self, backend_id: str, value: int) -> None:
        if not KEY_RE.match(backend_id) or self.store.read_state(backend_id) is None:
            raise BackendError(f"the local backend has no job {backend_id!r}")
        self.store.set_priority(backend_id, value)

    def drain(self, node: str, reason: str) -> None:
        with self.store.locked():
            self.store.write_drained({**self.store.drained(), node: reason})

    def resume(self, node: str) -> None:
        with self.store.locked():
            drained = self.store.drained()
            if drained.pop(node, None) is not None:
                self.store.write_drained(drained)
            self._schedule_locked()  # what waited for this node may start now

    def log(self, backend_id: str, *, offset: int = 0, limit: int = 1 << 20) -> str:
        if not KEY_RE.match(backend_id):
            return ""
        return self.store.read_log(backend_id, offset=offset, limit=limit)

    def log_path(self, backend_id: str) -> str:
        return self.store.kept_log_path(backend_id) if KEY_RE.match(backend_id) else ""

    def health(self, nodes: list[str]) -> dict[str, NodeHealth]:
        """The host's health, for each of its virtual nodes (the probe is pluggable)."""
        return self._health_probe(list(nodes), root=self.root)

    def usage(self, backend_ids: list[str]) -> dict[str, list[Run]]:
        """The booked allocation × the supervisor's start and end, for finished jobs."""
        found = {}
        for key in backend_ids:
            state = self.store.read_state(key) if KEY_RE.match(key) else None
            if state is not None and state.get("state") in FINAL:
                found[key] = job_usage.runs(key, state)
        return found

    def accounted(self, start: datetime, end: datetime) -> list[Run]:
        """The runs of every finished job (kept folders, archived states) ended in [start, end)."""
        return [
            run
            for key, state in self.store.final_states()
            for run in job_usage.runs(key, state)
            if run.ended_at is not None and start <= run.ended_at < end
        ]

    def apply_lease(self, lease: LeaseView, *, now: float) -> None:
        """The lent nodes serve the borrowing pool until the lease's end (kept up to date:
        an end brought forward applies at once)."""
        entry = {"nodes": list(lease.nodes), "pool": lease.pool, "until": lease.ends_at}
        with self.store.locked():
            leases = self.store.leases()
            if leases.get(lease.name) == entry:
                return
            leases[lease.name] = entry
            self.store.write_leases(leases)
            self._schedule_locked()  # what waited for these nodes may start now

    def end_lease(self, lease: LeaseView) -> None:
        """The nodes go back to their pool: nothing of the borrower starts there after this
        returns (what still runs there the engine requeues)."""
        with self.store.locked():
            leases = self.store.leases()
            if leases.pop(lease.name, None) is not None:
                self.store.write_leases(leases)

    def close(self) -> None:
        """Stop the root's launcher (the jobs' supervisors go on); the next submit starts it."""
        launch.stop_launcher(self.root)

    def housekeep(self, now: float | None = None) -> int:
        """Remove the folders of jobs that ended more than `retention_s` ago, then the
        oldest ended folders of each user and project whose ended folders together hold more
        than their total; keep their logs and final states. Returns how many folders it
        removed. Runs from the engine's periodic housekeeping."""
        cutoff = (time.time() if now is None else now) - self.retention_s
        with self.store.locked():
            # Retires the jobs that ended since the last pass.
            self._live_allocations(find_dead=True)
            warm.instances(self.store)  # clears warm sandboxes that ended
            if self.cgroups:  # groups a supervisor could not remove as its job ended
                cgroup.sweep(self.cgroups, self._ended)
        removed = 0
        for key in self.store.expired(older_than=cutoff):
            if KEY_RE.match(key):
                self.store.archive(key)
                removed += 1
        return removed + self.folder_totals.keep(self.store)

    def _ended(self, key: str) -> bool:
        state = self.store.read_state(key) if KEY_RE.match(key) else None
        return state is None or state["state"] in FINAL

    # -- scheduling pass ---------------------------------------------------------------

    def _schedule_locked(self, *, find_dead: bool = False) -> dict[str, dict]:
        """Run the pass over the pending jobs and carry its decisions out (under the lock).
        Returns the states it read, as it left them, of the jobs it did not start or fail
        (a poll of 10,000 jobs reads each file once). With `find_dead` (a poll's pass), jobs
        whose supervisor died are failed too; other passes leave that to the next poll."""
        allocations, per_queue, states = self._live_allocations(find_dead=find_dead)
        local_images.release_started(self.root, states)  # their supervisors pin their images
        for key, why in pulls.follow(self.root, self.store, states, time.time()).items():
            del states[key]
            self._fail_unstarted(key, why)
        waiting = {
            key: state
            for key, state in states.items()
            if state["state"] == "pending" and not pulls.waiting(state)
        }
        if not waiting:
            return states
        jobs = []
        for key, state in waiting.items():
            request = self.store.request(key)
            jobs.append(
                WaitingJob(
                    key=key,
                    spec=request.spec,
                    queue=request.queue,
                    priority=self.store.priority(key),
                    seq=int(state.get("seq", 0)),
                    sandboxed=True,  # every type runs in the sandbox
                    runtime_s=request.planned_runtime_s,  # None: planned by its walltime
                )
            )
        missing = None if shutil.which(self.bwrap) else BWRAP_MISSING
        now = time.time()
        decisions = self._decide(  # crosspool.py: schedule_pass, then backfill across pools
            jobs,
            pools=self._lent(self._inventory()),
            allocations=allocations,
            running=per_queue,
            drained=self.store.drained(),
            sandbox_missing=missing,
            now=now,
            busy=lambda: self._planned_ends(states, now),  # read only to make a reservation
        )
        plans = {}
        for decision in decisions:
            if isinstance(decision, Start):
                state, request = states.pop(decision.key), self.store.request(decision.key)
                try:  # a job whose start cannot be prepared fails alone, with the reason
                    plan = self._prepare_start(decision.key, request, decision.placement, state)
                except Exception as exc:
                    self._fail_unstarted(decision.key, local_images.why_not(exc))
                    continue
                if pulls.waiting(state):  # its image was evicted: it waits for a new pull
                    states[decision.key] = state
                    continue
                if plan is not None:
                    plans[decision.key] = plan
            elif isinstance(decision, Fail):
                del states[decision.key]
                self._fail_unstarted(decision.key, decision.reason)
            else:
                self._set_waiting(decision.key, decision.reason, states[decision.key])
        failed = launch.start_supervisors(
            self.store, plans, self.python, launcher=self.launcher, children=self._children
        )
        for key, reason in failed.items():
            self._fail_unstarted(key, reason)
        return states

    def _live_allocations(
        self, *, find_dead: bool = False
    ) -> tuple[dict[str, list[NodeAllocation]], Counter[str], dict[str, dict]]:
        """Allocations of starting/running jobs by node, running jobs per queue, and the
        state of every job it read; retires what has finished and, with `find_dead`, fails
        the jobs whose supervisor died."""
        for key, child in list(self._children.items()):
            if child.poll() is not None:  # reaps it
                del self._children[key]
        allocations: dict[str, list[NodeAllocation]] = defaultdict(list)
        per_queue: Counter[str] = Counter()
        states: dict[str, dict] = {}
        for key in self.store.active_keys():
            state = self.store.read_state(key)
            if state is None:
                self.store.retire(key)
                continue
            states[key] = state
            if state["state"] in FINAL:
                self.store.retire(key)
                continue
            if state["state"] == "pending":
                continue
            if find_dead and not launch.supervisor_alive(self.store, key, state):
                # Re-read: it may have written its final state just before exiting.
                state = self.store.read_state(key) or state
                if state["state"] not in FINAL:
                    launch.signal_child(state, signal.SIGKILL)  # leave no orphan running
                    state.update(
                        state="failed",
                        reason=f"{SUPERVISOR_DIED} (killed, or the machine restarted)",
                        ended_at=now_iso(),
                    )
                    self.store.write_state(key, state)
                states[key] = state
                self.store.retire(key)
                continue
            for a in self.store.read_alloc(key, state).allocations:
                allocations[a.node].append(a)
            per_queue[state.get("queue", "")] += 1
        return allocations, per_queue, states

    def _lent(self, pools: dict[str, tuple[NodeView, ...]]) -> dict[str, tuple[NodeView, ...]]:
        """The inventory with the nodes of the leases this backend was told about moved."""
        loans = {
            node: Loan(entry["pool"], float(entry["until"]))
            for entry in self.store.leases().values()
            for node in entry["nodes"]
        }
        if not loans:
            return pools
        return {pool: tuple(nodes) for pool, nodes in lend(pools, loans).items()}

    def _inventory(self) -> dict[str, tuple[NodeView, ...]]:
        """The nodes by pool name; "" holds nodes whose pool the source does not say.

        node_source may return a list (every node serves every queue of this backend) or a
        mapping pool name -> nodes (a queue only uses its own pool's nodes).
        """
        now = time.monotonic()
        if self._inventory_cache and now - self._inventory_cache[0] < self.inventory_ttl_s:
            return self._inventory_cache[1]
        nodes = self._node_source(self.alias)
        if isinstance(nodes, Mapping):
            inventory = {pool: tuple(ns) for pool, ns in nodes.items()}
        else:
            inventory = {"": tuple(nodes)}
        self._inventory_cache = (now, inventory)
        return inventory

    # -- starting a job ----------------------------------------------------------------

    def _fail_unstarted(self, key: str, reason: str) -> None:
        state = self.store.read_state(key) or {}
        state.update(state="failed", reason=reason, ended_at=now_iso())
        self.store.write_state(key, state)
        self.store.retire(key)

    def _set_waiting(self, key: str, reason: str, state: dict) -> None:
        """`state` is the job's state as this pass read it (under the lock: still current)."""
        if state.get("reason") != reason:  # no write per pass when nothing changed
            state["reason"] = reason
            self.store.write_state(key, state)
