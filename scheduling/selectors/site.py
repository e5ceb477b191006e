"""The site's policy as plain decision values, read once and cached briefly."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from portal.models import Project
from scheduling import hooks
from scheduling.decisions import PoolCapacity, pool_capacity
from scheduling.decisions.borrow import Borrowing
from scheduling.decisions.canary import CanaryError, parse_rule_set
from scheduling.decisions.catalogue import Catalogue
from scheduling.decisions.classify import DEFAULT_CLASSIFIER, ClassifierPolicy
from scheduling.decisions.devices import DeviceTable, device_table
from scheduling.decisions.lend import Loan, lend
from scheduling.decisions.levels import LevelRule
from scheduling.decisions.order import ScheduleError, WeightWindow, parse_weight_schedule
from scheduling.decisions.quota import QuotaRule
from scheduling.decisions.storage import AreaView
from scheduling.decisions.types import NodeView, QueuePolicy, RoutingRuleView
from scheduling.models import (
    Canary,
    ClassifierSettings,
    Instance,
    Node,
    NodeLease,
    Pool,
    PoolBorrowing,
    Queue,
    Quota,
    RoutingRule,
)
from scheduling.models import LevelRule as LevelRuleRow
from scheduling.selectors.images import image_catalogue
from scheduling.selectors.storage import storage_areas
from scheduling.spec import TASK_TYPES


def queue_policy(queue: Queue) -> QueuePolicy:
    return QueuePolicy(
        name=queue.name,
        pool=queue.pool.name,
        task_types=tuple(queue.task_types or ()),
        max_walltime_s=queue.max_walltime_s,
        default_walltime_s=queue.default_walltime_s,
        requires_estimate=queue.requires_estimate,
        preemptible=queue.preemptible,
        allocation=queue.allocation,
        cpu_oversubscription=queue.cpu_oversubscription,
        max_concurrency=queue.max_concurrency,
        policy=queue.policy,
        over_concurrency=queue.over_concurrency,
        idle_scale_in_s=queue.idle_scale_in_s,
        wait_bound_s=queue.wait_bound_s,
    )


def node_view(node: Node) -> NodeView:
    return NodeView(
        name=node.name,
        cpus=node.cpus,
        memory_mib=node.memory_mib,
        gpus=node.gpus,
        gpu_model=node.gpu_model or None,
        switch=node.switch or None,
        available=node.state == Node.State.UP,
    )


def node_views_for_backend(alias: str) -> dict[str, list[NodeView]]:
    """The inventory a backend runs on, by pool: a queue's jobs go only to its pool's nodes.

    Leases are not applied here: the engine tells the backend about them (`apply_lease`,
    `end_lease`), and the local backend moves the lent nodes itself (docs/capacity.md).
    """
    pools: dict[str, list[NodeView]] = {}
    for node in Node.objects.filter(pool__backend=alias).select_related("pool").order_by("name"):
        pools.setdefault(node.pool.name, []).append(node_view(node))
    return pools


def borrowing_for_backend(alias: str) -> list[Borrowing]:
    """The pairs of the backend's pools switched on for backfill across pools
    (docs/policy.md, "Backfill across pools")."""
    rows = PoolBorrowing.objects.filter(
        enabled=True, borrower__backend=alias, lender__backend=alias
    ).select_related("borrower", "lender")
    return [Borrowing(r.borrower.name, r.lender.name, r.cpus_per_free_gpu) for r in rows]


def device_tables(
    pools: Iterable[Pool], nodes: Iterable[Node], serving: Mapping[str, Iterable[NodeView]]
) -> dict[str, DeviceTable]:
    """Each pool's device files, with those of the nodes serving it (its own, and those lent
    to it: a lent node keeps its own files) where they differ."""
    own = {node.name: node.devices for node in nodes}
    return {
        pool.name: device_table(
            pool.devices,
            [(n.name, own[n.name]) for n in serving.get(pool.name, ()) if n.name in own],
        )
        for pool in pools
    }


def active_loans() -> dict[str, Loan]:
    """Every node of a lease in effect (active, not waiting for its pre-pull): the borrowing
    queue's pool, and the lease's end."""
    return {
        node: Loan(pool, until.timestamp())
        for pool, node, until in NodeLease.objects.filter(NodeLease.in_effect()).values_list(
            "queue__pool__name", "nodes__name", "ends_at"
        )
        if node
    }


def with_leases(pools: dict[str, list[NodeView]]) -> dict[str, list[NodeView]]:
    """`pools` with every active lease's nodes moved to the borrowing queue's pool."""
    loans = active_loans()
    return lend(pools, loans) if loans else pools


@dataclass(frozen=True, slots=True)
class SiteView:
    """The policy of the whole site, as the pure decision functions take it."""

    queues: dict[str, QueuePolicy]
    queue_ids: dict[str, int]
    queue_backends: dict[str, str]
    rules: tuple[RoutingRuleView, ...]
    pool_nodes: dict[str, tuple[NodeView, ...]]
    pool_capacity: dict[str, PoolCapacity]
    classifier: ClassifierPolicy = DEFAULT_CLASSIFIER
    level_rules: tuple[LevelRule, ...] = ()
    weights: dict[str, tuple[WeightWindow, ...]] = field(default_factory=dict)
    # Quota rules by (project slug, queue name); each knows its optional user.
    quotas: dict[tuple[str, str], tuple[QuotaRule, ...]] = field(default_factory=dict)
    shares: dict[str, int] = field(default_factory=dict)  # project slug → fair-share shares
    # Active leases: (id, borrowing queue, end in epoch seconds).
    leases: tuple[tuple[int, str, float], ...] = ()
    # This portal's name on shared clusters (models.Instance).
    instance: str = ""
    # Each pool's device files, for the jobs of its queues (decisions/devices.py).
    devices: dict[str, DeviceTable] = field(default_factory=dict)
    # The active canary: (its id, its share of submissions in percent, the site as its rules
    # make it). Tasks it took are routed and levelled by `arm(canary_id)`.
    canary: tuple[int, int, SiteView] | None = None
    # The storage areas, with the pools that mount them (docs/storage.md).
    storage: tuple[AreaView, ...] = ()
    # The image catalogue, with each pool's image size limit (docs/containers.md).
    images: Catalogue = field(default_factory=Catalogue)
    # Projects with an allocation (accounting's): only their work asks it (docs/accounting.md).
    allocated: frozenset[str] = frozenset()

    def arm(self, canary_id: int | None) -> SiteView:
        """The site as a task's rules see it: the canary's, for a task the canary took."""
        if canary_id is not None and self.canary is not None and self.canary[0] == canary_id:
            return self.canary[2]
        return self

    def capacity(self, pool: str) -> PoolCapacity:
        return self.pool_capacity.get(pool) or pool_capacity(())

    def quota_rules(self, project: str, queue: str) -> tuple[QuotaRule, ...]:
        return self.quotas.get((project, queue), ())

    def quota_cohort(self, project: str, queue: str) -> tuple[QuotaRule, ...]:
        """What the other projects' quotas in `queue` lend to `project` (its cohort); empty
        when none of `project`'s quotas there may borrow, so nothing else need be read."""
        if not any(r.lends and r.borrowing_limit for r in self.quota_rules(project, queue)):
            return ()
        return tuple(
            r
            for (other, name), rules in self.quotas.items()
            if name == queue and other != project
            for r in rules
            if r.lends
        )


_site_cache: dict[str, tuple[float, SiteView]] = {}
_site_lock = threading.Lock()
_reloading: set[str] = set()  # "site" while one thread of this process reloads it
# Submissions read the site policy on every request; a short cache keeps that off the hot
# path. Admin edits are seen by every process within this many seconds.
SITE_CACHE_SECONDS = 2.0


def site_view(*, fresh: bool = False) -> SiteView:
    """The site's policy, at most SITE_CACHE_SECONDS old. When it expires one thread reloads
    it and the process's other threads go on with the expired view meanwhile (a web worker's
    threads all reloading at once cost a tenth of its time under load)."""
    now = time.monotonic()
    with _site_lock:
        cached = _site_cache.get("site")
        current = cached and now - cached[0] < SITE_CACHE_SECONDS
        if cached and not fresh and (current or "site" in _reloading):
            return cached[1]
        _reloading.add("site")
    try:
        view = _load_site_view()
    finally:
        with _site_lock:
            _reloading.discard("site")
    with _site_lock:
        _site_cache["site"] = (now, view)
    return view


def site_view_invalidate() -> None:
    with _site_lock:
        _site_cache.clear()


def _load_site_view() -> SiteView:
    queues = list(Queue.objects.select_related("pool"))
    pool_nodes: dict[str, list[NodeView]] = {}
    node_rows = list(Node.objects.select_related("pool").order_by("name"))
    for node in node_rows:
        pool_nodes.setdefault(node.pool.name, []).append(node_view(node))
    rules = tuple(
        RoutingRuleView(
            order=r.order,
            queue=r.queue.name,
            match_type=r.match_type or None,
            min_gpus=r.min_gpus,
            min_cpus=r.min_cpus,
        )
        for r in RoutingRule.objects.filter(enabled=True).select_related("queue")
    )
    quotas: dict[tuple[str, str], list[QuotaRule]] = {}
    for q in Quota.objects.select_related("project", "queue", "user"):
        quotas.setdefault((q.project.slug, q.queue.name), []).append(quota_rule(q))
    settings_row = ClassifierSettings.objects.filter(pk=1).first()
    instance = Instance.objects.get_or_create(pk=1, defaults={"name": secrets.token_hex(4)})[0]
    lent = with_leases({pool: list(nodes) for pool, nodes in pool_nodes.items()})
    view = SiteView(
        queues={q.name: queue_policy(q) for q in queues},
        queue_ids={q.name: q.pk for q in queues},
        queue_backends={q.name: q.pool.backend for q in queues},
        rules=rules,
        # Where work may go now (leases applied); what each pool could ever hold (they not).
        pool_nodes={pool: tuple(nodes) for pool, nodes in lent.items()},
        pool_capacity={pool: pool_capacity(nodes) for pool, nodes in pool_nodes.items()},
        devices=device_tables({q.pool.name: q.pool for q in queues}.values(), node_rows, lent),
        classifier=classifier_policy(settings_row) if settings_row else DEFAULT_CLASSIFIER,
        instance=instance.name,
        level_rules=tuple(r.as_rule() for r in LevelRuleRow.objects.select_related("queue")),
        weights={q.name: _windows(q) for q in queues},
        quotas={key: tuple(rules) for key, rules in quotas.items()},
        shares=dict(Project.objects.values_list("slug", "share")),
        leases=tuple(
            (pk, queue, ends.timestamp())
            for pk, queue, ends in NodeLease.objects.filter(NodeLease.in_effect()).values_list(
                "pk", "queue__name", "ends_at"
            )
        ),
        storage=tuple(storage_areas()),
        images=image_catalogue(),
        allocated=hooks.allocated_projects(),
    )
    return _with_canary(view)


def _with_canary(view: SiteView) -> SiteView:
    """The active canary's rules beside the current ones (checked when it was started; a
    rule naming a queue deleted since just drops out, as it does of the current ones)."""
    canary = Canary.objects.filter(state=Canary.State.ACTIVE).first()
    if canary is None:
        return view
    known = set(view.queues)
    try:
        rules, levels_ = parse_rule_set(
            {
                "routing_rules": [r for r in canary.routing_rules if r.get("queue") in known],
                "level_rules": [
                    r for r in canary.level_rules if r.get("queue") in known or not r.get("queue")
                ],
            },
            queues=known,
            task_types=TASK_TYPES,
        )
    except CanaryError:
        return view  # nothing of it fits the site any more: the current rules serve everyone
    arm = replace(view, rules=rules, level_rules=levels_)
    return replace(view, canary=(canary.pk, canary.share_percent, arm))


def quota_rule(quota: Quota) -> QuotaRule:
    return QuotaRule(
        project=quota.project.slug,
        queue=quota.queue.name,
        resource=quota.resource,
        limit=quota.limit,
        over_quota=quota.over_quota,
        user=quota.user.get_username() if quota.user is not None else None,
        id=quota.pk,
        period=quota.period,
        borrowing_limit=quota.borrowing_limit,
        lending_limit=quota.lending_limit,
    )


def classifier_policy(row: ClassifierSettings) -> ClassifierPolicy:
    return ClassifierPolicy(
        many_gpus=row.many_gpus,
        many_cpus=row.many_cpus,
        long_estimate_s=row.long_estimate_s,
        short_s=row.short_s,
        small_cpus=row.small_cpus,
        small_gpus=row.small_gpus,
    )


def _windows(queue: Queue) -> tuple[WeightWindow, ...]:
    try:
        return parse_weight_schedule(queue.weight_schedule, TASK_TYPES)
    except ScheduleError:
        return ()  # the admin form refuses it; a bad row must not stop the site
