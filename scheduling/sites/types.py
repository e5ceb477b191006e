"""A site as plain values: pools with their nodes, queues and routing rules. No Django.

The same values feed `seed_demo` (which writes them to the database), the unit tests, the
benchmarks and the simulator, which must run without loading Django. The pieces are the
decision functions' own types (`scheduling/decisions/types.py`), so a site's pools, queues and
rules go straight into `route`, `check` and `place` (see `docs/architecture.md`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduling.decisions.borrow import Borrowing
from scheduling.decisions.catalogue import FAMILIES, ImageEntry, RegistryEntry
from scheduling.decisions.levels import LevelRule
from scheduling.decisions.storage import AreaView, overlap_problem
from scheduling.decisions.types import NodeView, QueuePolicy, RoutingRuleView

# The values of `scheduling.models.Pool.Kind`, as plain strings (this package may not import
# the models); tests/unit/scheduling/test_sites.py keeps the two in step.
POOL_KINDS = ("cpu-hpc", "gpu-training", "inference", "sandbox")


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """A pool: its name, its kind (one of `POOL_KINDS`) and its nodes, in creation order."""

    name: str
    kind: str
    nodes: tuple[NodeView, ...]


@dataclass(frozen=True, slots=True)
class QuotaTemplate:
    """A quota every project gets; `limit` is its nominal amount. With a `borrowing_limit`
    a project may go that far over it on the unused quota of the other projects in the
    queue, each lending at most `lending_limit` (None: all it does not use); docs/policy.md."""

    queue: str
    resource: str  # gpus | cpus | tasks
    limit: int
    over_quota: str = "queue"
    borrowing_limit: int = 0
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class LeaseTemplate:
    """Every day at `start` (HH:MM, site time), lend `count` idle nodes of `pool` to `queue`."""

    pool: str
    queue: str
    count: int
    start: str
    duration_s: int


@dataclass(frozen=True, slots=True)
class RateTemplate:
    """A price per shown unit of a metric (docs/accounting.md); queue "" means every queue
    without its own (and collectors' samples)."""

    queue: str
    metric: str  # cpu | gpu | memory | instance | storage | network
    price: str  # a decimal, in the site's currency


@dataclass(frozen=True, slots=True)
class Site:
    """Pools, queues and routing rules that refer to each other by name.

    Building one checks that the names hold together: pool, node and queue names are unique,
    pool kinds are known, every queue's pool and every rule's queue exists.
    """

    pools: tuple[PoolSpec, ...]
    queues: tuple[QueuePolicy, ...]
    rules: tuple[RoutingRuleView, ...]
    level_rules: tuple[LevelRule, ...] = ()
    # Quotas every project gets (seed_demo writes one per project).
    project_quotas: tuple[QuotaTemplate, ...] = ()
    # Each queue's time-of-day weights, as the queue stores them (docs/policy.md).
    weight_schedules: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Queues' start-up timeouts in seconds (docs/capacity.md).
    startup_timeouts: dict[str, int] = field(default_factory=dict)
    # Queues' live-sandbox warm pools, {template: count} (docs/sandboxes.md).
    warm_pools: dict[str, dict[str, int]] = field(default_factory=dict)
    lease_schedules: tuple[LeaseTemplate, ...] = ()
    rates: tuple[RateTemplate, ...] = ()
    # Storage areas; their paths lie below the site's storage folder (seed_demo: the var
    # folder's, so that the demo needs no root-owned /scratch), docs/storage.md.
    storage_areas: tuple[AreaView, ...] = ()
    # The image catalogue (docs/containers.md): seed_demo names the registry a site sets
    # (SWITCHYARD_IMAGE_REGISTRY) in place of this one's.
    image_registries: tuple[RegistryEntry, ...] = ()
    images: tuple[ImageEntry, ...] = ()
    # Backfill across pools switched on: which pool's CPU jobs may use which pool's idle
    # cores (docs/policy.md, "Backfill across pools").
    borrowing: tuple[Borrowing, ...] = ()

    def __post_init__(self) -> None:
        _unique("pool", [p.name for p in self.pools])
        _unique("node", [n.name for n in self.nodes])
        _unique("queue", [q.name for q in self.queues])
        pools = {p.name for p in self.pools}
        queues = {q.name for q in self.queues}
        for pool in self.pools:
            if pool.kind not in POOL_KINDS:
                raise ValueError(
                    f"pool {pool.name} has kind {pool.kind!r}; known kinds: {', '.join(POOL_KINDS)}"
                )
        for queue in self.queues:
            if queue.pool not in pools:
                raise ValueError(f"queue {queue.name} names pool {queue.pool}, which is not here")
        for rule in self.rules:
            if rule.queue not in queues:
                raise ValueError(f"rule {rule.order} names queue {rule.queue}, which is not here")
        for pair in self.borrowing:
            if {pair.borrower, pair.lender} - pools or pair.borrower == pair.lender:
                raise ValueError(
                    f"backfill from {pair.borrower} onto {pair.lender}: expected two pools "
                    "of the site"
                )
        _unique("storage area", [a.name for a in self.storage_areas])
        for area in self.storage_areas:
            if set(area.pools) - pools:
                raise ValueError(f"storage area {area.name} names a pool that is not here")
            others = [(a.name, a.path, a.owner) for a in self.storage_areas if a is not area]
            problem = overlap_problem(area.path, area.owner, others)
            if problem is not None:
                raise ValueError(f"storage area {area.name}: {problem}")
        hosts = {r.host for r in self.image_registries}
        for image in self.images:
            if image.registry not in hosts or set(image.pools) - pools:
                raise ValueError(f"image {image.shown} names a registry or pool that is not here")
            if image.family not in FAMILIES:
                raise ValueError(f"image {image.shown} has family {image.family!r}")
        for rate in self.rates:
            if rate.queue and rate.queue not in queues:
                raise ValueError(
                    f"a {rate.metric} rate names queue {rate.queue}, which is not here"
                )

    @property
    def nodes(self) -> tuple[NodeView, ...]:
        """Every node of every pool, pool by pool."""
        return tuple(n for p in self.pools for n in p.nodes)

    def nodes_by_pool(self) -> dict[str, list[NodeView]]:
        """Each pool's nodes (a new dict of new lists on each call), in creation order."""
        return {p.name: list(p.nodes) for p in self.pools}

    def queues_by_name(self) -> dict[str, QueuePolicy]:
        return {q.name: q for q in self.queues}


def _unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"two {what}s are named {name}")
        seen.add(name)
