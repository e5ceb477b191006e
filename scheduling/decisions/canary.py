"""A canary rule set: routing and level rules tried on a share of submissions first, beside
the current ones (docs/console.md). Pure: parsing and the draw."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduling.decisions.levels import LevelRule
from scheduling.decisions.types import RoutingRuleView

_ROUTING_FIELDS = {"order", "match_type", "min_gpus", "min_cpus", "queue"}
_LEVEL_FIELDS = {"task_type", "queue", "start_level", "step", "every_s", "limit_level", "repeat"}


class CanaryError(ValueError):
    def __init__(self, errors: list[tuple[str, str, Any]]) -> None:
        super().__init__(errors[0][1])
        self.errors = errors  # (field, message, got)


def in_canary(draw: float, share_percent: int) -> bool:
    """Whether a submission with a uniform `draw` in [0, 1) goes to the canary."""
    return draw * 100 < share_percent


def parse_rule_set(
    data: Mapping[str, Any], *, queues: Iterable[str], task_types: Iterable[str]
) -> tuple[tuple[RoutingRuleView, ...], tuple[LevelRule, ...]]:
    """`{"routing_rules": [...], "level_rules": [...]}` → views the decisions take; every
    mistake is named by its path (`routing_rules[2].queue`)."""
    queues, task_types = set(queues), set(task_types)
    errors: list[tuple[str, str, Any]] = []
    routing = data.get("routing_rules")
    levels_ = data.get("level_rules", [])
    if not isinstance(routing, list) or not routing:
        errors.append(("routing_rules", "a list of at least one rule", routing))
        routing = []
    if not isinstance(levels_, list):
        errors.append(("level_rules", "a list of rules", levels_))
        levels_ = []
    rules = []
    for i, row in enumerate(routing):
        where = f"routing_rules[{i}]"
        if not _mapping(row, where, _ROUTING_FIELDS, errors):
            continue
        order = _int(row.get("order"), f"{where}.order", errors, required=True)
        queue = row.get("queue")
        if queue not in queues:
            errors.append((f"{where}.queue", f"one of {', '.join(sorted(queues))}", queue))
        match = row.get("match_type") or None
        if match is not None and match not in task_types:
            errors.append((f"{where}.match_type", f"one of {', '.join(sorted(task_types))}", match))
        rules.append(
            RoutingRuleView(
                order=order or 0,
                queue=str(queue),
                match_type=match,
                min_gpus=_int(row.get("min_gpus"), f"{where}.min_gpus", errors),
                min_cpus=_int(row.get("min_cpus"), f"{where}.min_cpus", errors),
            )
        )
    level_rules = []
    seen = set()
    for i, row in enumerate(levels_):
        where = f"level_rules[{i}]"
        if not _mapping(row, where, _LEVEL_FIELDS, errors):
            continue
        kind, queue = row.get("task_type"), row.get("queue") or None
        if kind not in task_types:
            errors.append((f"{where}.task_type", f"one of {', '.join(sorted(task_types))}", kind))
        if queue is not None and queue not in queues:
            errors.append((f"{where}.queue", f"one of {', '.join(sorted(queues))}", queue))
        if (kind, queue) in seen:
            errors.append((where, "a second rule for the same type and queue", kind))
        seen.add((kind, queue))
        start = _int(
            row.get("start_level", 1), f"{where}.start_level", errors, top=2, required=True
        )
        step = _int(row.get("step", 0), f"{where}.step", errors, low=-1, top=1, required=True)
        every = _int(row.get("every_s"), f"{where}.every_s", errors, low=1)
        limit = _int(row.get("limit_level"), f"{where}.limit_level", errors, top=2)
        if step and not every:
            errors.append((f"{where}.every_s", "a rule that moves needs a period", every))
        level_rules.append(
            LevelRule(
                task_type=str(kind),
                queue=queue,
                start=start if start is not None else 1,
                step=step or 0,
                every_s=every,
                limit=limit,
                repeat=bool(row.get("repeat", False)),
            )
        )
    if errors:
        raise CanaryError(errors)
    return tuple(sorted(rules, key=lambda r: r.order)), tuple(level_rules)


def _mapping(row: Any, where: str, allowed: set[str], errors: list) -> bool:
    if not isinstance(row, dict):
        errors.append((where, "a mapping of fields", row))
        return False
    unknown = sorted(set(row) - allowed)
    if unknown:
        errors.append(
            (
                f"{where}.{unknown[0]}",
                f"not a field; one of {', '.join(sorted(allowed))}",
                unknown[0],
            )
        )
    return True


def _int(value: Any, where: str, errors: list, *, required=False, low=0, top=None) -> int | None:
    if value is None:
        if required:
            errors.append((where, "required: a whole number", None))
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (top is not None and value > top)
    ):
        bounds = f"from {low}" + (f" to {top}" if top is not None else "")
        errors.append((where, f"a whole number {bounds}", value))
        return None
    return value
