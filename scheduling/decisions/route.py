"""Which queue a classified task goes to: the one it asked for, or the first rule's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from scheduling.decisions.types import QueuePolicy, Refused, Routed, RoutingRuleView
from scheduling.spec import TaskSpec

_by_order = attrgetter("order")


def route(
    spec: TaskSpec,
    task_type: str,
    rules: Sequence[RoutingRuleView],
    queues: Mapping[str, QueuePolicy],
) -> Routed | Refused:
    """The queue for a task of `task_type`, or why there is none.

    An explicit `spec.queue` is honoured if it exists and takes this type. Otherwise the rules
    are tried by `order`; the first whose predicates all hold wins. A rule whose queue is not
    in `queues` (deleted, or not offered here) is skipped rather than routing into nothing.
    """
    if spec.queue is not None:
        queue = queues.get(spec.queue)
        if queue is None:
            known = ", ".join(sorted(queues)) or "none"
            return Refused(f"unknown queue {spec.queue}; known queues: {known}", field="queue")
        if queue.task_types and task_type not in queue.task_types:
            return Refused(
                f"queue {queue.name} takes {', '.join(queue.task_types)} tasks, not {task_type}",
                field="queue",
            )
        return Routed(queue.name, f"queue {queue.name} requested")

    gpus = spec.resources.gpus
    cpus = spec.resources.cpus
    for rule in sorted(rules, key=_by_order):
        if rule.match_type is not None and rule.match_type != task_type:
            continue
        if rule.min_gpus is not None and gpus < rule.min_gpus:
            continue
        if rule.min_cpus is not None and cpus < rule.min_cpus:
            continue
        if rule.queue not in queues:
            continue
        return Routed(rule.queue, f"rule {rule.order}: {describe_rule(rule)} → queue {rule.queue}")

    return Refused(
        f"no routing rule matches type {task_type} with {gpus} GPUs / {cpus} CPUs",
        # A declared type with no route is the researcher's field to change; an inferred one
        # is a gap in the rules.
        field="type" if spec.type is not None else None,
    )


def describe_rule(rule: RoutingRuleView) -> str:
    """The rule's match in words: `type ai-training`, `≥ 4 GPUs`, `any task`."""
    parts = []
    if rule.match_type is not None:
        parts.append(f"type {rule.match_type}")
    if rule.min_gpus is not None:
        parts.append(f"≥ {rule.min_gpus} GPUs")
    if rule.min_cpus is not None:
        parts.append(f"≥ {rule.min_cpus} CPUs")
    return ", ".join(parts) or "any task"
