"""Live sandboxes on the local backend (docs/sandboxes.md): the protocol's session calls.

A session is a job whose spec has `session_idle_s`: its supervisor binds `session.sock` in
its folder and runs the agent in the sandbox (sessionplan.py). Execs and files go straight to
that socket (session/wire.py), with no lock and no state write: a call costs a connect, the
agent's fork and exec, and the answer. Its walltime, a cancel and the watchdog end it as any
job; once it has ended its socket is gone and every call is SessionGone.

A warm sandbox (warm.py) is claimed inside a scheduling pass, so a claimed session holds its
node's capacity and obeys its queue's limits like any job; a pass that cannot start it now
leaves it pending (started cold later), and the warm sandbox waits for the next claim.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from scheduling.backends.base import (
    BackendError,
    ExecRequest,
    ExecResult,
    Job,
    SessionGone,
    SubmitRequest,
    WarmSpec,
    WarmView,
)
from scheduling.backends.local import launch, limits, starting, warm
from scheduling.backends.local.jobstore import FINAL, KEY_RE, JobStore, job_from, now_iso
from scheduling.backends.session import box, egress, proxylog, wire
from scheduling.decisions.types import NodeView, Placement

log = logging.getLogger(__name__)

# What a claimed session's state takes over from its warm sandbox's: its processes.
_PROCESS_FIELDS = (
    "shim_pid",
    "shim_start",
    "child_pid",
    "child_pgid",
    "child_start",
    "sandbox_pid",
    "sandbox_start",
)


class LocalSessions:
    """The local backend's live sandboxes (mixed into LocalBackend)."""

    sessions = True
    # The backend's own (backend.py), read here and by warm.py.
    root: str
    store: JobStore
    bwrap: str
    python: str
    launcher: bool
    job_account: str
    kill_grace_s: float
    limits: limits.JobLimits
    pid_max: int
    slirp4netns: str
    cgroups: dict | None
    cgroups_refused: str
    _children: dict[str, subprocess.Popen[bytes]]
    _sockets: dict[str, str]
    _claims: dict[str, str]

    def find(self, key: str) -> Job | None:
        raise NotImplementedError  # the backend's own

    def _schedule_locked(self, *, find_dead: bool = False) -> dict[str, dict]:
        raise NotImplementedError  # the backend's own

    def _inventory(self) -> dict[str, tuple[NodeView, ...]]:
        raise NotImplementedError  # the backend's own

    def _fail_unstarted(self, key: str, reason: str) -> None:
        raise NotImplementedError  # the backend's own

    def _session_socket(self, backend_id: str) -> str:
        path = self._sockets.get(backend_id)
        if path is not None:
            return path
        state = self.store.read_state(backend_id) if KEY_RE.match(backend_id) else None
        if state is None:
            raise SessionGone(f"the local backend has no sandbox {backend_id!r}")
        if state["state"] in FINAL:
            raise SessionGone(f"the sandbox has ended: {state.get('reason') or state['state']}")
        if state["state"] != "running":
            raise BackendError("the sandbox has not started yet")
        if not state.get("session") and self.store.request(backend_id).spec.session_idle_s is None:
            raise SessionGone(f"job {backend_id!r} is not a live sandbox")
        path = state.get("session_socket") or self.store.path(backend_id, box.SOCKET_NAME)
        self._sockets[backend_id] = path
        return path

    def _session_call(self, backend_id: str, call: Callable[[str], Any]) -> Any:
        try:
            return call(self._session_socket(backend_id))
        except SessionGone:
            self._sockets.pop(backend_id, None)
            raise
        except wire.AgentRefused:
            raise
        except BackendError:
            # Cut off mid-call: if the session has ended meanwhile, that is what to say.
            state = self.store.read_state(backend_id) or {}
            if state.get("state") in FINAL:
                self._sockets.pop(backend_id, None)
                raise SessionGone(
                    f"the sandbox has ended: {state.get('reason') or state['state']}"
                ) from None
            raise

    def exec_in(
        self,
        backend_id: str,
        request: ExecRequest,
        *,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> ExecResult:
        return self._session_call(
            backend_id, lambda path: wire.exec_in(path, request, on_output=on_output)
        )

    def put_file(self, backend_id: str, path: str, data: bytes, *, mode: int = 0o644) -> None:
        self._session_call(backend_id, lambda at: wire.put_file(at, path, data, mode=mode))

    def get_file(self, backend_id: str, path: str, *, limit: int) -> bytes:
        return self._session_call(backend_id, lambda at: wire.get_file(at, path, limit=limit))

    def egress_audit(self, backend_id: str, *, limit_bytes: int = 4 << 20) -> list[dict]:
        """The session's egress audit: its proxy's log in its job folder (sessionplan.py)."""
        if not KEY_RE.match(backend_id):
            raise SessionGone(f"{backend_id!r} is not a session of this backend")
        log = self.store.path(backend_id, f"egress/{egress.LOG_NAME}")
        return proxylog.read_tail(log, limit=limit_bytes)

    # -- the warm pool -------------------------------------------------------------------

    def keep_warm(self, specs: list[WarmSpec]) -> list[WarmView]:
        with self.store.locked():
            return warm.keep(self, specs)

    def claim_warm(self, request: SubmitRequest) -> Job | None:
        """A warm sandbox of the request's shape, handed to `request.key` in a scheduling
        pass (so it books its capacity), started now; None when none is warm, the request
        cannot use one (egress, GPUs, environment values, a researcher's own account: warm
        sandboxes run as the service account), or it is there already. A session has no
        storage areas either way (sessionplan.py)."""
        spec = request.spec
        if (
            spec.session_idle_s is None
            or spec.egress
            or spec.resources.gpus
            or request.extra.get("run_as")
            or spec.env
            or spec.secret_env
        ):
            return None
        launch.validate(request)
        if self.find(request.key) is not None:
            return None
        shape = warm.shape_of(spec)
        with self.store.locked():
            found = warm.ready_one(self.store, shape, spec.image_digest or "")
            if found is None:
                return None
            self.store.create(request)
            self._claims[request.key] = found[0]
            try:
                self._schedule_locked()
            finally:
                self._claims.pop(request.key, None)
            state = self.store.read_state(request.key) or {}
        after = (state.get("session_socket"), float(spec.session_idle_s))
        threading.Thread(target=self._refill, args=after, name="warm-refill", daemon=True).start()
        return job_from(request.key, state)

    def _refill(self, socket: str | None, idle_s: float) -> None:
        """After a claim, in the background: the claimed agent's idle backstop becomes its
        session's, and the replacements of claimed warm sandboxes start."""
        if socket:
            try:
                wire.ping(socket, idle_s=idle_s)
            except BackendError as exc:
                log.warning("the claimed sandbox at %s did not answer: %s", socket, exc)
        try:
            with self.store.locked():
                warm.fill(self, warm.wanted(self.store))
        except Exception:
            log.exception("the local warm pool of %s could not be refilled", self.root)

    def _prepare_start(
        self, key: str, request: SubmitRequest, placement: Placement, state: dict
    ) -> dict | None:
        """A claim's job takes its warm sandbox over (no supervisor to start); any other, or
        a claim whose warm sandbox has just gone, starts as usual."""
        warm_key = self._claims.get(key)
        warm_state = self.store.read_state(warm_key) if warm_key else None
        if warm_key is None or warm_state is None or warm_state.get("state") != "running":
            return starting.prepare_start(self, key, request, placement, state)
        state.update(
            {name: warm_state.get(name) for name in _PROCESS_FIELDS},
            state="running",
            reason="",
            started_at=now_iso(),  # metered from the claim: the session's creation
            nodes=list(placement.nodes),
            queue=request.queue.name,
            allocations=self.store.remember_alloc(key, placement),
            alloc={
                "cpus": sum(a.cpus for a in placement.allocations),
                "gpus": 0,
                "memory_mib": sum(a.memory_mib for a in placement.allocations),
                "nodes": len(placement.allocations),
            },
            session=True,
            session_socket=self.store.path(warm_key, box.SOCKET_NAME),
            warm=warm_key,
        )
        self.store.write_state(key, state)
        warm.claim_file(self.store, warm_key, key, state, request.spec.walltime_s)
        return None
