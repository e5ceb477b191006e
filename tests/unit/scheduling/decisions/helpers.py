"""What the tests of the pure policy functions share: units, a task spec builder, and the
default site's pools, queues and routing rules as fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.decisions import (
    NodeView,
    QueuePolicy,
    RoutingRuleView,
)
from scheduling.sites import default_site
from scheduling.spec import Resources, TaskSpec

MIN = 60
H = 3600
GIB = 1024
TIB = 1024 * GIB


def spec(
    *,
    cpus: int = 1,
    gpus: int = 0,
    memory_mib: int = GIB,
    nodes: int | None = None,
    gpu_type: str | None = None,
    **kw: Any,
) -> TaskSpec:
    res = Resources(cpus=cpus, gpus=gpus, memory_mib=memory_mib, nodes=nodes, gpu_type=gpu_type)
    return TaskSpec(name="t", project="p", resources=res, **kw)


@pytest.fixture
def pools() -> dict[str, list[NodeView]]:
    """The default site's nodes by pool (scheduling/sites/default.py, what seed_demo writes)."""
    return default_site().nodes_by_pool()


@pytest.fixture
def queues() -> dict[str, QueuePolicy]:
    return default_site().queues_by_name()


@pytest.fixture
def rules() -> list[RoutingRuleView]:
    return list(default_site().rules)
