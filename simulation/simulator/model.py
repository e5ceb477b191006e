"""The simulator's values: jobs, the site as it models it, and what a run recorded. No Django."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduling.decisions.borrow import Borrowing
from scheduling.decisions.levels import LevelRule
from scheduling.decisions.order import WeightWindow
from scheduling.decisions.quota import QuotaRule
from scheduling.decisions.types import NodeAllocation, NodeView, QueuePolicy
from scheduling.sites.types import LeaseTemplate, QuotaTemplate
from scheduling.spec import TaskSpec

POLICIES = ("fifo", "easy", "switchyard")
WEEK_S = 7 * 24 * 3600
# From an agent's start decision to its process running, as the local backend measures it:
# docs/benchmarks.md, "agent submit → running p50, process started (100 tasks at 5.0/s)",
# 32.2 ms (make bench, 2026-12-05; the rate nearest the validation day's one a minute). The
# simulator decides in no time, so this is the whole of what an agent waits on an idle pool.
AGENT_STARTUP_S = 0.0322


@dataclass(frozen=True, slots=True)
class SimJob:
    key: str
    spec: TaskSpec  # what it asks for; spec.walltime_s is what a scheduler may plan with
    type: str
    queue: str  # its queue under the `switchyard` policy
    submit: float  # seconds from the start of the run
    runtime: float  # how long it really runs (at most its walltime)
    user: str = "sim"

    @property
    def project(self) -> str:
        return self.spec.project


@dataclass(frozen=True, slots=True)
class Failure:
    """Node `node` goes down at `at` for `down_s` seconds; what ran on it starts again."""

    node: str
    at: float
    down_s: float


@dataclass(frozen=True, slots=True)
class Site:
    """The site as the simulator sees it: pools, queues and the policy around them.

    `level_rules`, `weights` (per queue), `quotas` (templates for every project, or one
    project's own rules), `leases` (daily),
    `shares` and `half_life_s` (fair share) are the site's own policy; they matter only to
    the `switchyard` policy. `start_minute` is the site time of day at t = 0 (weights and
    lease schedules are in site time). `preempt_after_s`: how long a task waits unstarted
    before it may preempt (the live engine's SWITCHYARD_PREEMPT_AFTER_S). `startup_s`: per
    task type, seconds from the start decision to the process running (its room is held from
    the decision; its wait and its runtime count from the process's start).
    """

    pools: Mapping[str, Sequence[NodeView]]
    queues: Mapping[str, QueuePolicy]
    level_rules: tuple[LevelRule, ...] = ()
    weights: Mapping[str, tuple[WeightWindow, ...]] = field(default_factory=dict)
    quotas: tuple[QuotaTemplate | QuotaRule, ...] = ()  # every project's, or one's own
    leases: tuple[LeaseTemplate, ...] = ()
    shares: Mapping[str, float] = field(default_factory=dict)
    half_life_s: float = WEEK_S
    start_minute: int = 8 * 60
    preempt_after_s: float = 10.0
    # Behind a pool's reservations: "shortest" planned runtime first (EASY++), or
    # "priority" order.
    backfill: str = "shortest"
    startup_s: Mapping[str, float] = field(default_factory=dict)
    # Which pools' CPU jobs may run on which pools' idle cores (docs/policy.md, "Backfill
    # across pools"); none by default.
    borrowing: tuple[Borrowing, ...] = ()

    @property
    def nodes(self) -> list[NodeView]:
        return [n for nodes in self.pools.values() for n in nodes]


@dataclass(slots=True)
class Outcome:
    """A job's run that completed (its last attempt), and what came before it."""

    key: str
    type: str
    project: str
    submit: float
    start: float
    end: float
    # start + its planned runtime, what a scheduler plans with (not the runtime): its walltime;
    # under the site policy its prediction, moved on as it outlives it (docs/predictions.md)
    planned_end: float
    allocations: tuple[NodeAllocation, ...] = ()
    attempts: int = 1
    first_start: float | None = None
    room_at_submit: bool | None = None  # whether its pool could start it when it arrived

    @property
    def wait(self) -> float:
        """From submit to its first start (a run preempted or lost later is not waiting)."""
        return (self.start if self.first_start is None else self.first_start) - self.submit


@dataclass(frozen=True, slots=True)
class Span:
    """One attempt on its nodes, from start to end (completed, preempted, lost or reclaimed)."""

    key: str
    type: str
    start: float
    end: float
    allocations: tuple[NodeAllocation, ...]
    ended: str = "done"  # done | preempted | lost | reclaimed


@dataclass(slots=True)
class Run:
    policy: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    never: dict[str, str] = field(default_factory=dict)  # key → why it never ran
    never_types: dict[str, str] = field(default_factory=dict)  # key → its type
    spans: list[Span] = field(default_factory=list)
    leases: list[tuple[float, float, tuple[str, ...]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    passes: int = 0
    queued: dict[str, float] = field(default_factory=dict)  # key → when first admitted to wait
    # key → the predicted runtime its last start was planned with (site policy; none: walltime)
    predicted: dict[str, float] = field(default_factory=dict)
