"""The default site: 40 nodes in three pools, three queues and five routing rules.

`manage.py seed_demo` writes exactly this to the database; the decision tests, the benchmarks
and the simulator use it as it is. Nodes are numbered from 001 within their prefix and hang
ten to a switch named `<pool>-sw<n>`.
"""

from __future__ import annotations

from functools import cache

from scheduling.decisions.borrow import Borrowing
from scheduling.decisions.catalogue import DEPRECATED, ImageEntry, RegistryEntry
from scheduling.decisions.levels import HIGH, LOW, MEDIUM, LevelRule
from scheduling.decisions.storage import AreaView
from scheduling.decisions.types import NodeView, QueuePolicy, RoutingRuleView
from scheduling.sites.types import LeaseTemplate, PoolSpec, QuotaTemplate, RateTemplate, Site

GIB = 1024  # MiB
HOUR = 3600  # seconds
# The project's own registry (docker/images/registry.sh, `make registry-up`).
DEMO_REGISTRY = "127.0.0.1:15000"


def _nodes(
    pool: str,
    prefix: str,
    count: int,
    *,
    cpus: int,
    memory_gib: int,
    gpus: int = 0,
    gpu_model: str | None = None,
) -> tuple[NodeView, ...]:
    """`count` identical idle nodes `<prefix>001`…, ten to a switch."""
    return tuple(
        NodeView(
            name=f"{prefix}{i:03d}",
            cpus=cpus,
            memory_mib=memory_gib * GIB,
            gpus=gpus,
            gpu_model=gpu_model,
            switch=f"{pool}-sw{(i - 1) // 10 + 1}",
        )
        for i in range(1, count + 1)
    )


@cache
def default_site() -> Site:
    """The default site (immutable, so every caller shares one instance)."""
    pools = (
        PoolSpec(
            name="gpu-train",
            kind="gpu-training",
            nodes=_nodes(
                "gpu-train", "gpu", 20, cpus=64, memory_gib=1024, gpus=8, gpu_model="A100"
            ),
        ),
        PoolSpec(
            name="inference-agent",
            kind="inference",
            nodes=_nodes(
                "inference-agent", "inf", 10, cpus=32, memory_gib=256, gpus=4, gpu_model="L40S"
            )
            + _nodes("inference-agent", "agt", 5, cpus=64, memory_gib=512),
        ),
        PoolSpec(
            name="cpu-hpc",
            kind="cpu-hpc",
            nodes=_nodes("cpu-hpc", "cpu", 5, cpus=64, memory_gib=512),
        ),
    )
    queues = (
        QueuePolicy(
            name="training",
            pool="gpu-train",
            task_types=("ai-training",),
            max_walltime_s=None,
            default_walltime_s=None,
            requires_estimate=True,
            preemptible=False,
            allocation="whole-node",
            cpu_oversubscription=1,
            max_concurrency=None,
            policy="priority-quota",
            # Past 6 h waiting, nothing passes it (docs/policy.md, "A bound on waiting"):
            # longer than any wait of the validation day, whose GPU row a bound of an hour
            # or less costs up to 1.7 points.
            wait_bound_s=6 * HOUR,
        ),
        QueuePolicy(
            name="inference-agent",
            pool="inference-agent",
            task_types=("ai-inference", "agent", "sandbox"),
            max_walltime_s=1 * HOUR,
            default_walltime_s=1 * HOUR,
            requires_estimate=False,
            preemptible=True,
            allocation="pack",
            cpu_oversubscription=4,
            max_concurrency=500,
            policy="elastic",
            idle_scale_in_s=120,
        ),
        QueuePolicy(
            name="hpc",
            pool="cpu-hpc",
            task_types=("hpc-simulation",),
            max_walltime_s=72 * HOUR,
            default_walltime_s=72 * HOUR,
            requires_estimate=False,
            preemptible=False,
            allocation="pack",
            cpu_oversubscription=1,
            max_concurrency=None,
            policy="fairshare",
            wait_bound_s=24 * HOUR,
        ),
    )
    rules = (
        RoutingRuleView(order=10, match_type="ai-training", queue="training"),
        RoutingRuleView(order=20, match_type="hpc-simulation", queue="hpc"),
        RoutingRuleView(order=30, match_type="ai-inference", queue="inference-agent"),
        RoutingRuleView(order=40, match_type="agent", queue="inference-agent"),
        RoutingRuleView(order=50, match_type="sandbox", queue="inference-agent"),
    )
    # Multi-level feedback: agent and sandbox tasks enter high and drop to
    # medium after 30 s unstarted; training enters medium and rises one level per 10 minutes
    # waiting, up to high; HPC enters low (only an approved request raises it).
    level_rules = (
        LevelRule("agent", start=HIGH, step=-1, every_s=30, limit=MEDIUM),
        LevelRule("sandbox", start=HIGH, step=-1, every_s=30, limit=MEDIUM),
        LevelRule("ai-training", start=MEDIUM, step=+1, every_s=600, limit=HIGH, repeat=True),
        LevelRule("ai-inference", start=MEDIUM),
        LevelRule("hpc-simulation", start=LOW),
    )
    # 32 GPUs per project in training, a queue quota that lends: over it a project's
    # training borrows other projects' unused quota, up to 96 GPUs more (so one project
    # holds at most 128 of the pool's 160, and two always find room); each project lends
    # all it does not use. A lending limit keeps part of a project's quota idle for it
    # alone, which the validation day measures at up to 1.5 points of site GPU
    # utilisation (docs/policy.md, "Quotas that lend"). Past that, its training waits.
    project_quotas = (QuotaTemplate("training", "gpus", 32, "queue", borrowing_limit=96),)
    # Daytime favours interactive agent work, night the batch inference.
    weight_schedules = {
        "inference-agent": [
            {"from": "08:00", "to": "20:00", "weights": {"agent": 2, "sandbox": 2}},
            {"from": "20:00", "to": "08:00", "weights": {"ai-inference": 2}},
        ]
    }
    # HPC work that waits for its five CPU nodes may run, by its walltime, on the other
    # pools' idle cores until their next reservation (docs/policy.md, "Backfill across
    # pools"). The inference pool keeps no cores for its free GPUs: its queue oversubscribes
    # CPUs 1:4, so an inference job's cores fit beside a borrowed job anyway. A training node
    # keeps its own cores per free GPU: a whole-node training starts only on an empty node,
    # so a core lent on an idle one would hold its eight GPUs for the borrowed walltime.
    borrowing = (
        Borrowing("cpu-hpc", "inference-agent", cpus_per_free_gpu=0),
        Borrowing("cpu-hpc", "gpu-train"),
    )
    # Agents that do not start within 5 minutes of their dispatch are resubmitted.
    startup_timeouts = {"inference-agent": 5 * 60}
    # Two live sandboxes of the host's system kept started ahead (docs/sandboxes.md).
    warm_pools = {"inference-agent": {"": 2}}
    # Idle inference GPUs lent to training at night for 4 hours, then taken back (docs/capacity.md).
    lease_schedules = (LeaseTemplate("inference-agent", "training", 4, "22:00", 4 * HOUR),)
    # Prices (docs/accounting.md): HPC is charged strictly per core, training and inference
    # per GPU-hour, agents and sandboxes per instance-minute; storage and network for all.
    rates = (
        RateTemplate("hpc", "cpu", "0.06"),
        RateTemplate("training", "gpu", "12.00"),
        RateTemplate("inference-agent", "gpu", "8.00"),
        RateTemplate("inference-agent", "instance", "0.02"),
        RateTemplate("", "storage", "0.0005"),
        RateTemplate("", "network", "0.50"),
    )
    # Every pool mounts each project's folder and each user's read-write, and the site's
    # datasets read-only (docs/storage.md); below the site's storage folder.
    every_pool = tuple(pool.name for pool in pools)
    storage_areas = (
        AreaView("projects", "/projects/{project}", "project", pools=every_pool),
        AreaView("home", "/home/{user}", "user", pools=every_pool),
        AreaView("datasets", "/datasets", "site", read_only=True, pools=every_pool),
    )
    # The demo image catalogue (docs/containers.md): the registry's images, by family, and
    # demo/python:3 for a newcomer's first image. No default images: a task that names none
    # runs on its pool's own software, as before there was a catalogue.
    image_registries = (RegistryEntry(DEMO_REGISTRY),)
    agents = ("agent", "sandbox")
    images = (
        ImageEntry(DEMO_REGISTRY, "switchyard/base", "sandbox-base", ("1",), task_types=agents),
        ImageEntry(
            DEMO_REGISTRY,
            "switchyard/python",
            "agent-runtime",
            ("3",),
            task_types=(*agents, "ai-inference"),
        ),
        ImageEntry(DEMO_REGISTRY, "demo/python", "agent-runtime", ("3",)),
        ImageEntry(DEMO_REGISTRY, "demo/tiny", "hpc-toolchain", ("2",)),
        ImageEntry(
            DEMO_REGISTRY,
            "demo/tiny",
            "hpc-toolchain",
            ("1",),
            state=DEPRECATED,
            note="use demo/tiny:2",
        ),
    )
    return Site(
        pools=pools,
        queues=queues,
        rules=rules,
        level_rules=level_rules,
        project_quotas=project_quotas,
        weight_schedules=weight_schedules,
        startup_timeouts=startup_timeouts,
        warm_pools=warm_pools,
        lease_schedules=lease_schedules,
        rates=rates,
        storage_areas=storage_areas,
        image_registries=image_registries,
        images=images,
        borrowing=borrowing,
    )
