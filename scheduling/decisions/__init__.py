"""Pure policy: classify, route, check and place tasks. No ORM, no I/O, no clock.

The live engine and the simulator call these same functions. Every decision carries a reason
in words a researcher reads, with the numbers that decided it.
"""

from __future__ import annotations

from scheduling.decisions.check import NodeShape, PoolCapacity, check, pool_capacity
from scheduling.decisions.check import asked as check_asked
from scheduling.decisions.classify import DEFAULT_CLASSIFIER, ClassifierPolicy, classify
from scheduling.decisions.humanize import format_duration, format_memory
from scheduling.decisions.place import PACK, WHOLE_NODE, cpu_ratio, free_view, place, usable_cpus
from scheduling.decisions.route import describe_rule, route
from scheduling.decisions.types import (
    Classified,
    NodeAllocation,
    NodeView,
    Placement,
    QueuePolicy,
    Refused,
    Routed,
    RoutingRuleView,
)

__all__ = [
    "DEFAULT_CLASSIFIER",
    "PACK",
    "WHOLE_NODE",
    "Classified",
    "ClassifierPolicy",
    "NodeAllocation",
    "NodeShape",
    "NodeView",
    "Placement",
    "PoolCapacity",
    "QueuePolicy",
    "Refused",
    "Routed",
    "RoutingRuleView",
    "check",
    "check_asked",
    "classify",
    "cpu_ratio",
    "describe_rule",
    "format_duration",
    "format_memory",
    "free_view",
    "place",
    "pool_capacity",
    "route",
    "usable_cpus",
]
