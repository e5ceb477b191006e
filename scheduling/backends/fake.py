"""An in-memory backend for tests: records every call, runs nothing.

Jobs live in a class-level registry keyed by alias, so a test can inspect what the engine
submitted through whichever instance `get_backend()` built (`FakeBackend.jobs_for("fake")`
-> {backend_id: Job}), and drive a job on with `finish()`.

`get_backend()` caches instances across tests, so the registry (and `calls`) is also scoped
to the running test (pytest's PYTEST_CURRENT_TEST): every test starts with an empty fake
cluster without having to reset anything.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from datetime import UTC, datetime
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured

from scheduling.backends.base import (
    Backend,
    BackendError,
    CachedImageView,
    ExecRequest,
    ExecResult,
    ImageCacheView,
    Job,
    JobState,
    LeaseView,
    NodeHealth,
    Prepulled,
    Run,
    SessionGone,
    SubmitRequest,
    WarmSpec,
    WarmView,
)
from scheduling.decisions.types import NodeView


@dataclasses.dataclass
class _Cluster:
    """What one alias holds during one test."""

    jobs: dict[str, Job] = dataclasses.field(default_factory=dict)
    requests: dict[str, SubmitRequest] = dataclasses.field(default_factory=dict)
    priorities: dict[str, int] = dataclasses.field(default_factory=dict)
    drained: dict[str, str] = dataclasses.field(default_factory=dict)
    health: dict[str, NodeHealth] = dataclasses.field(default_factory=dict)
    calls: list[tuple[str, tuple[Any, ...]]] = dataclasses.field(default_factory=list)
    # Pre-pulling: each node's images (reference -> bytes); references whose pull fails.
    cached: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    unpullable: set[str] = dataclasses.field(default_factory=set)
    # Live sandboxes: each session's files, the warm pools asked for and what they hold.
    files: dict[str, dict[str, bytes]] = dataclasses.field(default_factory=dict)
    warm_specs: list[WarmSpec] = dataclasses.field(default_factory=list)
    warm: dict[tuple[str, int, int], int] = dataclasses.field(default_factory=dict)
    hold_sessions: bool = False  # a session submitted stays pending (a test starts it)


def _test_scope() -> str:
    # "tests/x.py::test_y (call)" -> "tests/x.py::test_y": setup, call and teardown share it.
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    return current.rsplit(" (", 1)[0]


class FakeBackend(Backend):
    _registry: ClassVar[dict[tuple[str, str], _Cluster]] = {}
    _lock: ClassVar[threading.RLock] = threading.RLock()

    def __init__(
        self,
        alias: str,
        *,
        nodes: list[NodeView] | None = None,
        start_immediately: bool = False,
        **options: Any,
    ) -> None:
        # Decided by `"pytest" in sys.modules` rather than a settings flag: a flag can be left
        # on in a deployment by mistake, while a production process never imports pytest. A
        # backend that accepts work and runs nothing must never serve real users.
        if "pytest" not in sys.modules:
            raise ImproperlyConfigured(
                "FakeBackend is for tests only (it runs nothing): configure a real backend"
            )
        self.alias = alias
        self.options = options
        self.start_immediately = start_immediately  # submit -> RUNNING instead of PENDING
        self._nodes = list(nodes or ())

    # -- test helpers ------------------------------------------------------------------

    @classmethod
    def _cluster(cls, alias: str) -> _Cluster:
        with cls._lock:
            return cls._registry.setdefault((_test_scope(), alias), _Cluster())

    @classmethod
    def jobs_for(cls, alias: str) -> dict[str, Job]:
        """{backend_id: Job} of this alias in the current test."""
        return dict(cls._cluster(alias).jobs)

    @classmethod
    def requests_for(cls, alias: str) -> dict[str, SubmitRequest]:
        return dict(cls._cluster(alias).requests)

    @classmethod
    def reset(cls) -> None:
        with cls._lock:
            cls._registry.clear()

    @property
    def calls(self) -> list[tuple[str, tuple[Any, ...]]]:
        """Every protocol call made on this alias in the current test, as (method, args)."""
        return self._cluster(self.alias).calls

    def priority_of(self, backend_id: str) -> int | None:
        return self._cluster(self.alias).priorities.get(backend_id)

    def finish(
        self,
        backend_id: str,
        state: JobState,
        exit_code: int | None = None,
        nodes: tuple[str, ...] | None = None,
        at: datetime | None = None,
    ) -> Job:
        """Move a job to `state` as the test says (RUNNING starts it, on `nodes` if given;
        others end it), at `at` (default: now)."""
        with self._lock:
            cluster = self._cluster(self.alias)
            job = self._get(cluster, backend_id)
            now = at or datetime.now(UTC)
            reason = job.reason
            if state is JobState.FAILED and exit_code:
                reason = f"exit code {exit_code}"
            job = dataclasses.replace(
                job,
                state=state,
                exit_code=exit_code,
                reason=reason,
                started_at=job.started_at or now,
                ended_at=now if state.finished else None,
                nodes=job.nodes if nodes is None else tuple(nodes),
            )
            cluster.jobs[backend_id] = job
            return job

    # -- protocol ----------------------------------------------------------------------

    def submit_many(self, requests: list[SubmitRequest]) -> list[Job | BackendError]:
        """Each request recorded as a `submit` call of its own, as tests count them."""
        with self._lock:
            cluster = self._cluster(self.alias)
            return [self._submit_locked(cluster, request) for request in requests]

    def close(self) -> None:
        """Holds nothing; recorded, so tests see who closes the backend."""
        self._record("close")

    def find(self, key: str) -> Job | None:
        cluster = self._record("find", key)
        return cluster.jobs.get(key)

    def cancel(self, backend_id: str) -> None:
        with self._lock:
            cluster = self._record("cancel", backend_id)
            job = cluster.jobs.get(backend_id)
            if job is None or job.state.finished:
                return  # unknown or finished: a no-op, like the real backends
            cluster.jobs[backend_id] = dataclasses.replace(
                job, state=JobState.CANCELLED, reason="cancelled", ended_at=datetime.now(UTC)
            )

    def poll(self, backend_ids: list[str]) -> dict[str, Job]:
        cluster = self._record("poll", list(backend_ids))
        return {
            i: cluster.jobs.get(i) or Job(i, JobState.UNKNOWN, reason="no such job")
            for i in backend_ids
        }

    def nodes(self) -> list[NodeView]:
        cluster = self._record("nodes")
        return [
            dataclasses.replace(n, available=n.available and n.name not in cluster.drained)
            for n in self._nodes
        ]

    def set_priority(self, backend_id: str, value: int) -> None:
        with self._lock:
            cluster = self._record("set_priority", backend_id, value)
            self._get(cluster, backend_id)
            cluster.priorities[backend_id] = value

    def drain(self, node: str, reason: str) -> None:
        self._record("drain", node, reason).drained[node] = reason

    def resume(self, node: str) -> None:
        self._record("resume", node).drained.pop(node, None)

    def health(self, nodes: list[str]) -> dict[str, NodeHealth]:
        """Every node healthy unless a test said otherwise with `set_health`."""
        with self._lock:
            cluster = self._record("health", tuple(nodes))
            return {n: cluster.health.get(n, NodeHealth(ok=True)) for n in nodes}

    def set_health(self, node: str, health: NodeHealth) -> None:
        with self._lock:
            self._cluster(self.alias).health[node] = health

    def apply_lease(self, lease: LeaseView, *, now: float) -> None:
        with self._lock:
            self._record("apply_lease", lease.name, lease.nodes)

    def end_lease(self, lease: LeaseView) -> None:
        with self._lock:
            self._record("end_lease", lease.name, lease.nodes)

    prepulls = True

    def prepull(
        self, images: list[str], *, nodes: list[str], timeout_s: float
    ) -> dict[str, Prepulled]:
        """Each image "pulled" onto each node at once, unless the test made it unpullable."""
        with self._lock:
            cluster = self._record("prepull", tuple(images), tuple(nodes))
            out = {}
            for ref in images:
                if ref in cluster.unpullable:
                    out[ref] = Prepulled(False, "pulling failed: unpullable in this test")
                    continue
                for node in nodes:
                    cluster.cached.setdefault(node, {})[ref] = 1000
                out[ref] = Prepulled(True, "pulled")
            return out

    def image_caches(self) -> list[ImageCacheView]:
        with self._lock:
            cached = dict(self._cluster(self.alias).cached)
        return [
            ImageCacheView(
                nodes=(node,),
                images=tuple(
                    CachedImageView(ref, "sha256:" + "0" * 64, size, size, 0.0)
                    for ref, size in sorted(images.items())
                ),
                cache_bytes=sum(images.values()),
                pulled_bytes=sum(images.values()),
                pulls=len(images),
            )
            for node, images in sorted(cached.items())
        ]

    def usage(self, backend_ids: list[str]) -> dict[str, list[Run]]:
        """The request's resources × the job's start and end, for finished jobs."""
        cluster = self._record("usage", tuple(backend_ids))
        found = {}
        for backend_id in backend_ids:
            job = cluster.jobs.get(backend_id)
            if job is not None and job.state.finished:
                found[backend_id] = self._runs(cluster, job)
        return found

    def accounted(self, start: datetime, end: datetime) -> list[Run]:
        cluster = self._record("accounted", start, end)
        return [
            run
            for job in cluster.jobs.values()
            if job.state.finished
            for run in self._runs(cluster, job)
            if run.ended_at is not None and start <= run.ended_at < end
        ]

    def _runs(self, cluster: _Cluster, job: Job) -> list[Run]:
        request = cluster.requests.get(job.backend_id)
        if request is None or job.started_at is None or job.ended_at is None:
            return []
        res = request.spec.resources
        elapsed = round((job.ended_at - job.started_at).total_seconds() * 1000)
        return [
            Run(
                job.backend_id,
                request.key,
                res.cpus,
                res.gpus,
                res.memory_mib,
                res.nodes or 1,
                elapsed,
                job.started_at,
                job.ended_at,
            )
        ]

    def log(self, backend_id: str, *, offset: int = 0, limit: int = 1 << 20) -> str:
        cluster = self._record("log", backend_id, offset, limit)
        if backend_id not in cluster.jobs:
            return ""
        return f"fake log of {backend_id}\n"[offset : offset + limit]

    # -- live sandboxes (in memory: a session is a dict of files) ------------------------

    sessions = True

    def hold_sessions(self, hold: bool = True) -> None:
        """Sessions submitted from now on stay pending until the test starts them."""
        with self._lock:
            self._cluster(self.alias).hold_sessions = hold

    def claim_warm(self, request: SubmitRequest) -> Job | None:
        with self._lock:
            cluster = self._record("claim_warm", request.key)
            if request.key in cluster.jobs:
                return cluster.jobs[request.key]
            shape = _shape(request)
            if cluster.warm.get(shape, 0) <= 0:
                return None
            cluster.warm[shape] -= 1
            job = Job(request.key, JobState.RUNNING, started_at=datetime.now(UTC))
            cluster.jobs[request.key] = job
            cluster.requests[request.key] = request
            cluster.files[request.key] = {}
            return job

    def keep_warm(self, specs: list[WarmSpec]) -> list[WarmView]:
        """Every pool asked for is full at once (the fake starts nothing)."""
        with self._lock:
            cluster = self._record("keep_warm", tuple(specs))
            cluster.warm_specs = list(specs)
            cluster.warm = {(s.template, s.cpus, s.memory_mb): s.count for s in specs if s.count}
            return [WarmView(s.template, s.count, 0) for s in specs if s.count]

    def exec_in(self, backend_id, request: ExecRequest, *, on_output=None) -> ExecResult:
        """A few commands, run on the session's files: `echo ARGS`, `cat PATH`, `true`,
        `false`, `exit N`; anything else exits 127. Output goes to `on_output` too."""
        files = self._session(backend_id, "exec_in", request.argv)
        out, err, code = _run(request, files)
        out, err = out[: request.max_output], err[: request.max_output]
        if on_output is not None:
            for stream, data in (("stdout", out), ("stderr", err)):
                if data:
                    on_output(stream, data)
        return ExecResult(out, err, code, 0.1)

    def put_file(self, backend_id: str, path: str, data: bytes, *, mode: int = 0o644) -> None:
        self._session(backend_id, "put_file", path)[_home(path)] = bytes(data)

    def get_file(self, backend_id: str, path: str, *, limit: int) -> bytes:
        files = self._session(backend_id, "get_file", path)
        if _home(path) not in files:
            raise BackendError(f"no such file: {path}")
        data = files[_home(path)]
        if len(data) > limit:
            raise BackendError(f"the file is larger than {limit} bytes")
        return data

    def _session(self, backend_id: str, method: str, *args: Any) -> dict[str, bytes]:
        with self._lock:
            cluster = self._record(method, backend_id, *args)
            job = cluster.jobs.get(backend_id)
            if job is None or job.state is not JobState.RUNNING:
                raise SessionGone(f"sandbox {backend_id} has ended")
            return cluster.files.setdefault(backend_id, {})

    # -- internals ---------------------------------------------------------------------

    def _submit_locked(self, cluster: _Cluster, request: SubmitRequest) -> Job:
        cluster.calls.append(("submit", (request,)))
        if request.key in cluster.jobs:  # idempotent by key, like the real backends
            return cluster.jobs[request.key]
        now = datetime.now(UTC)
        session = request.spec.session_idle_s is not None and not cluster.hold_sessions
        start = self.start_immediately or session
        job = Job(
            backend_id=request.key,
            state=JobState.RUNNING if start else JobState.PENDING,
            started_at=now if start else None,
        )
        cluster.jobs[request.key] = job
        cluster.requests[request.key] = request
        return job

    def _record(self, method: str, *args: Any) -> _Cluster:
        cluster = self._cluster(self.alias)
        cluster.calls.append((method, args))
        return cluster

    def _get(self, cluster: _Cluster, backend_id: str) -> Job:
        try:
            return cluster.jobs[backend_id]
        except KeyError:
            raise BackendError(f"fake backend {self.alias!r} has no job {backend_id!r}") from None


def _shape(request: SubmitRequest) -> tuple[str, int, int]:
    res = request.spec.resources
    return (request.spec.image or "", res.cpus, res.memory_mib)


def _home(path: str) -> str:
    """A path inside the session: relative ones resolve in its working folder."""
    return path if path.startswith("/") else "/home/sandbox/" + path


def _run(request: ExecRequest, files: dict[str, bytes]) -> tuple[bytes, bytes, int]:
    name, *args = request.argv
    if name == "echo":
        return (" ".join(args) + "\n").encode(), b"", 0
    if name == "cat" and not args:
        return request.stdin, b"", 0
    if name == "cat":
        missing = [a for a in args if _home(a) not in files]
        if missing:
            return b"", f"cat: {missing[0]}: No such file or directory\n".encode(), 1
        return b"".join(files[_home(a)] for a in args), b"", 0
    if name in ("true", "false"):
        return b"", b"", int(name == "false")
    if name == "exit" and args and args[0].isdigit():
        return b"", b"", int(args[0])
    return b"", f"{name}: command not found\n".encode(), 127
