"""The protocol every compute backend implements, and how backends are found by alias.

A backend is chosen per pool (`Pool.backend` names an alias of `settings.COMPUTE_BACKENDS`).
The engine only ever talks to this protocol, so the local runner, Slurm and the simulator are
interchangeable behind it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from scheduling.decisions.devices import NO_DEVICES, DeviceTable
from scheduling.decisions.storage import JobStorage
from scheduling.decisions.types import NodeView, QueuePolicy, Run

# The backends decode their logs with these (re-exported: they were defined here).
from scheduling.logtext import LogText as LogText
from scheduling.logtext import decode_log as decode_log
from scheduling.logtext import raw_length as raw_length
from scheduling.spec import TaskSpec


class BackendError(Exception):
    """The backend could not do what was asked (unreachable, refused, timed out)."""


class BackendUnavailable(BackendError):
    """The backend could not be reached at all; the call may succeed later."""


class JobState(enum.StrEnum):
    PENDING = "pending"  # accepted by the backend, not started
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    NODE_FAIL = "node_fail"
    UNKNOWN = "unknown"  # the backend no longer knows the job

    @property
    def finished(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING)


@dataclass(frozen=True, slots=True)
class Job:
    """What one submission became, as the backend sees it now."""

    backend_id: str
    state: JobState
    reason: str = ""  # why it waits, or why it ended, in words a researcher reads
    exit_code: int | None = None
    nodes: tuple[str, ...] = ()
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # Its image's pull onto its node(s), once one began (docs/containers.md); None without.
    pull: ImagePull | None = None


@dataclass(frozen=True, slots=True)
class ImagePull:
    """How far the pull of a job's image onto its node(s) is: while it pulls, the job shows
    "pulling image" with this progress; once done, its time and bytes are recorded apart
    from the job's own run time. Over several nodes: the slowest node's."""

    done_bytes: int
    total_bytes: int | None  # None while the manifest is not read yet
    seconds: float  # spent pulling so far (all of it, once finished)
    finished: bool


@dataclass(frozen=True, slots=True)
class Prepulled:
    """How one image's pre-pull went (docs/containers.md, "Pre-pulling"): `ok` once it is in
    the cache of every node asked; `note` says what it took, or why not."""

    ok: bool
    note: str


@dataclass(frozen=True, slots=True)
class CachedImageView:
    """One image in a node's cache: what the Capacity page lists."""

    reference: str
    digest: str
    bytes: int  # on the node: unpacked
    pull_bytes: int  # what pulling it moved
    last_used: float  # epoch seconds


@dataclass(frozen=True, slots=True)
class ImageCacheView:
    """An image cache of the backend's nodes: the nodes it serves (a local backend's nodes
    share one), its images, its size and what every pull into it moved."""

    nodes: tuple[str, ...]
    images: tuple[CachedImageView, ...]
    cache_bytes: int
    pulled_bytes: int
    pulls: int


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """Everything a backend needs to run one attempt of a task."""

    key: str  # unique per task attempt, safe alphabet [a-z0-9-]; names the job
    spec: TaskSpec
    type: str  # the resolved task type
    queue: QueuePolicy
    project: str
    user: str
    extra: dict[str, str] = field(default_factory=dict)
    # The portal's priority number for the job (higher starts first; docs/policy.md).
    priority: int = 0
    # The device files of the nodes it may run on: it gets its GPUs' (decisions/devices.py).
    devices: DeviceTable = NO_DEVICES
    # The storage folders bound into its sandbox and the folder it starts in (docs/storage.md).
    storage: JobStorage = field(default_factory=JobStorage)
    # How long the work is predicted to run, in seconds (None: no earlier run to go by): a
    # backend that plans reservations itself (local) plans the job by it, corrected once the
    # job outlives it. It never ends the job: the walltime does (docs/predictions.md).
    planned_runtime_s: float | None = None


class SessionGone(BackendError):
    """The live sandbox has ended (idle, walltime, deleted, failed) or never existed here."""


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """One command run in a live sandbox (docs/sandboxes.md): `argv` exactly as given, never
    through a shell; `cwd` relative to the sandbox's working folder unless absolute; output
    past `max_output` bytes per stream is cut (`truncated`)."""

    argv: tuple[str, ...]
    stdin: bytes = b""
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    timeout_s: float = 60.0
    max_output: int = 1 << 20


@dataclass(frozen=True, slots=True)
class ExecResult:
    stdout: bytes
    stderr: bytes
    exit_code: int | None  # None: killed at its timeout (`timed_out`) or by the sandbox's end
    duration_ms: float
    timed_out: bool = False
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class WarmSpec:
    """Keep `count` sandboxes of this shape started ahead (a backend's warm pool): handed to
    the next session of the same template, replaced in the background."""

    template: str  # "" for the host's own system, else an image reference with its digest
    cpus: int
    memory_mb: int
    count: int


@dataclass(frozen=True, slots=True)
class WarmView:
    template: str
    ready: int  # started and waiting
    starting: int


@dataclass(frozen=True, slots=True)
class LeaseView:
    """Nodes lent by their pool's queues to another queue (of pool `pool`) until `ends_at`
    (epoch seconds)."""

    id: int
    nodes: tuple[str, ...]
    lender_queues: tuple[str, ...]
    queue: str
    pool: str
    ends_at: float

    @property
    def name(self) -> str:
        return f"lease-{self.id}"


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """A node's health as its backend sees it: `down` nodes have lost their work."""

    ok: bool
    reason: str = ""
    down: bool = False
    metrics: dict = field(default_factory=dict)


class ClusterAccounts(Protocol):
    """A backend whose jobs run under the cluster's own accounts (Slurm): each project is an
    account there, its members associated with it (`manage.py slurm_sync_accounts`)."""

    # Whom the jobs of researchers without a cluster account of their own run as.
    service_account: str | None

    def ensure_association(self, project: str, unix_user: str | None) -> None: ...

    def set_account_share(self, project: str, shares: int) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """Backends subclass it: `submit` is written once, here, over `submit_many`, and `close`
    does nothing unless the backend overrides it."""

    alias: str

    def submit_many(self, requests: list[SubmitRequest]) -> list[Job | BackendError]:
        """Submit many jobs: each request's job, or the error that refused it, in order.
        A job already made under a request's key is found, not made twice. Once the backend
        is unreachable the rest are not tried: each gets that error."""
        ...

    def submit(self, request: SubmitRequest) -> Job:
        """One request's job, or the error that refused it, raised: `submit_many` of one."""
        [result] = self.submit_many([request])
        if isinstance(result, BackendError):
            raise result
        return result

    def find(self, key: str) -> Job | None: ...

    def cancel(self, backend_id: str) -> None: ...

    def poll(self, backend_ids: list[str]) -> dict[str, Job]: ...

    def nodes(self) -> list[NodeView]: ...

    def set_priority(self, backend_id: str, value: int) -> None: ...

    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str) -> None: ...

    def log(self, backend_id: str, *, offset: int = 0, limit: int = 1 << 20) -> str: ...

    def log_path(self, backend_id: str) -> str:
        """The file the job's output is written to, for as long as the portal keeps it
        (recorded on the attempt at submission: the portal reads the log from there, never
        through the backend); "" when there is no such file."""
        return ""

    def health(self, nodes: list[str]) -> dict[str, NodeHealth]: ...

    def usage(self, backend_ids: list[str]) -> dict[str, list[Run]]:
        """The runs of these jobs, for the ones that have finished and been accounted; a job
        still running, or whose accounting is not there yet, is left out (asked again later)."""
        ...

    def accounted(self, start: datetime, end: datetime) -> list[Run]:
        """Every run of this portal's jobs that ended in [start, end), from the backend's own
        accounting (what reconciliation compares with)."""
        ...

    def apply_lease(self, lease: LeaseView, *, now: float) -> None: ...

    def end_lease(self, lease: LeaseView) -> None: ...

    def housekeep(self) -> int:
        """Clean up after ended jobs (e.g. the local backend's retention of job folders), from
        the engine's periodic housekeeping. Returns how many things it removed; most backends
        keep nothing."""
        return 0

    # Whether `prepull` does anything: a lease of this backend's nodes waits for it only then.
    prepulls: bool = False

    def prepull(
        self, images: list[str], *, nodes: list[str], timeout_s: float
    ) -> dict[str, Prepulled]:
        """Pull these images (references in full, by tag or digest) into the caches of these
        nodes ahead of use, waiting at most `timeout_s` (an image not there by then is not
        ok; its pull may go on). A backend that cannot pre-pull does nothing ({})."""
        return {}

    def image_caches(self) -> list[ImageCacheView]:
        """What the image caches of its nodes hold now ([]: none, or cannot say)."""
        return []

    def close(self) -> None:
        """Stop or release what the backend keeps between calls (a resident process, a
        connection) when the portal stops, like a Django cache backend's `close()`; the jobs
        go on, and a later call may start it again. Most backends hold nothing."""
        return None

    # Whether the jobs run as processes on this machine (the local backend's do): the host's
    # process limits then bound the queues' (decisions/processes.py). The settings say it too
    # (RUNS_ON_THIS_HOST in the alias's COMPUTE_BACKENDS entry), so that models and checks
    # know it without loading a backend; the engine refuses a backend whose settings disagree.
    runs_on_this_host: bool = False

    def cluster_accounts(self) -> ClusterAccounts | None:
        """The cluster's accounts, for a backend whose jobs run under them (Slurm); None for
        a backend without accounts of its own."""
        return None

    # Live sandboxes (docs/sandboxes.md): whether this backend runs sessions at all. A
    # session is submitted like any job (its `spec.session_idle_s` is set); these reach it.
    sessions: bool = False

    def claim_warm(self, request: SubmitRequest) -> Job | None:
        """Hand a warm sandbox of the request's shape to `request.key`, started now (what
        `find(request.key)` returns from then on); None when none is warm (then `submit`)."""
        return None

    def exec_in(
        self,
        backend_id: str,
        request: ExecRequest,
        *,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> ExecResult:
        """Run one command in a running session. `on_output("stdout"|"stderr", chunk)` is
        called as output arrives (streaming); the result holds it all (up to the cap) either
        way. Raises SessionGone once the session has ended."""
        raise SessionGone(f"backend {self.alias} runs no live sandboxes")

    def put_file(self, backend_id: str, path: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write a file inside the session's own file system (as the session's account)."""
        raise SessionGone(f"backend {self.alias} runs no live sandboxes")

    def get_file(self, backend_id: str, path: str, *, limit: int) -> bytes:
        """Read a file inside the session; more than `limit` bytes is a BackendError."""
        raise SessionGone(f"backend {self.alias} runs no live sandboxes")

    def egress_audit(self, backend_id: str, *, limit_bytes: int = 4 << 20) -> list[dict]:
        """A session's egress audit (session/proxylog.py's records: time, method, target,
        decision, reason), from at most the last `limit_bytes` of its proxy's log; [] for a
        session without egress or a backend without sessions."""
        return []

    def keep_warm(self, specs: list[WarmSpec]) -> list[WarmView]:
        """Keep exactly these warm pools (a template not listed, or with count 0, goes to
        zero); what each holds now. A backend without a warm pool returns []."""
        return []

    # Whether `started` can say at once which jobs have started (the local backend can: its
    # jobs are processes here); the engine then shows them running without waiting a poll.
    shows_starts: bool = False

    def started(self, backend_ids: list[str], *, within_s: float) -> dict[str, Job]:
        """The jobs among these that have started (or ended), waiting up to `within_s` for
        them; only asked of a backend whose `shows_starts` is true."""
        return {}


def submit_concurrently(
    submit: Callable[[SubmitRequest], Job], requests: list[SubmitRequest], *, workers: int
) -> list[Job | BackendError]:
    """`submit_many`'s contract for a backend whose submissions are independent commands
    (Slurm: one sbatch each, which the controller serves in parallel): up to `workers` run at
    once. Once one finds the backend unreachable, those not started yet are not tried."""
    results: list[Job | BackendError] = [BackendError("not submitted")] * len(requests)
    down: list[BackendUnavailable] = []

    def one(at: int) -> None:
        if down:
            results[at] = down[0]
            return
        try:
            results[at] = submit(requests[at])
        except BackendUnavailable as exc:
            down.append(exc)
            results[at] = exc
        except BackendError as exc:
            results[at] = exc

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(one, range(len(requests))))  # re-raises what is not a BackendError
    return results
