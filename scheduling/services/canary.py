"""Start, promote or abandon a canary rule set (platform admins; docs/console.md).

Promoting writes the canary's rules as the site's routing and level rules, through the
models, so the configuration history keeps the old ones and one rollback brings them back.
"""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal import audit, roles
from portal.errors import ApplicationError, ErrorItem
from scheduling.decisions.canary import CanaryError, parse_rule_set
from scheduling.models import Canary, LevelRule, Queue, RoutingRule
from scheduling.selectors import site_view_invalidate
from scheduling.spec import TASK_TYPES


def current_rule_set() -> dict:
    """The site's rules now, in the form a canary takes: the start of a new one."""
    return {
        "routing_rules": [
            {
                "order": r.order,
                "match_type": r.match_type or None,
                "min_gpus": r.min_gpus,
                "min_cpus": r.min_cpus,
                "queue": r.queue.name,
            }
            for r in RoutingRule.objects.filter(enabled=True).select_related("queue")
        ],
        "level_rules": [
            {
                "task_type": r.task_type,
                "queue": r.queue.name if r.queue is not None else None,
                "start_level": r.start_level,
                "step": r.step,
                "every_s": r.every_s,
                "limit_level": r.limit_level,
                "repeat": r.repeat,
            }
            for r in LevelRule.objects.select_related("queue")
        ],
    }


def _admin(user: User) -> None:
    if not roles.is_platform_admin(user):
        raise ApplicationError("only a platform admin runs canaries", status=403)


@transaction.atomic
def canary_start(
    *, user: User, name: object, share_percent: object, rule_set: object, reason: str
) -> Canary:
    _admin(user)
    errors = []
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        errors.append(ErrorItem("name", "a name of 1 to 100 characters", name))
    if (
        isinstance(share_percent, bool)
        or not isinstance(share_percent, int)
        or not (1 <= share_percent <= 100)
    ):
        errors.append(ErrorItem("share_percent", "a whole number from 1 to 100", share_percent))
    if not isinstance(rule_set, dict):
        errors.append(ErrorItem("rules", "a mapping with routing_rules and level_rules", None))
    else:
        try:
            parse_rule_set(
                rule_set,
                queues=Queue.objects.values_list("name", flat=True),
                task_types=TASK_TYPES,
            )
        except CanaryError as exc:
            errors.extend(ErrorItem(f, m, g) for f, m, g in exc.errors)
    if errors or not isinstance(rule_set, dict):  # not a dict: its error is in errors
        raise ApplicationError("invalid canary", errors=errors)
    try:
        with transaction.atomic(), audit.because(reason):
            canary = Canary.objects.create(
                # Both were checked above: a string and a whole number.
                name=cast(str, name).strip(),
                share_percent=cast(int, share_percent),
                routing_rules=rule_set["routing_rules"],
                level_rules=rule_set.get("level_rules", []),
                reason=reason,
                created_by=user,
            )
    except IntegrityError:
        raise ApplicationError(
            "a canary is already running: promote or abandon it first", status=409
        ) from None
    audit.record(
        audit.Action.CANARY_START,
        actor=user,
        target=str(canary),
        detail={"canary": canary.pk, "share_percent": share_percent, "reason": reason},
    )
    transaction.on_commit(site_view_invalidate)
    return canary


@transaction.atomic
def canary_end(*, user: User, canary: Canary, promote: bool, reason: str) -> Canary:
    """Promote (its rules become the site's) or abandon it; tasks it took keep its mark."""
    _admin(user)
    canary = Canary.objects.select_for_update().get(pk=canary.pk)
    if canary.state != Canary.State.ACTIVE:
        raise ApplicationError(f"the canary is already {canary.state}", status=409)
    if promote:
        queues = {q.name: q for q in Queue.objects.all()}
        try:
            routing, levels_ = parse_rule_set(
                {"routing_rules": canary.routing_rules, "level_rules": canary.level_rules},
                queues=queues,
                task_types=TASK_TYPES,
            )
        except CanaryError as exc:
            raise ApplicationError(f"its rules no longer fit the site: {exc}", status=409) from None
        # The rows are written from the parsed rules: what the canary ran is what is kept.
        with audit.because(reason or f"canary #{canary.pk} {canary.name} promoted"):
            for row in RoutingRule.objects.all():
                row.delete()  # one by one: each deletion is a version
            for rule in routing:
                RoutingRule.from_view(rule, queues).save()
            for level_row in LevelRule.objects.all():
                level_row.delete()
            for level_rule in levels_:
                LevelRule.from_rule(level_rule, queues).save()
    canary.state = Canary.State.PROMOTED if promote else Canary.State.ABANDONED
    canary.ended_at = timezone.now()
    canary.save(update_fields=["state", "ended_at"])
    audit.record(
        audit.Action.CANARY_PROMOTE if promote else audit.Action.CANARY_ABANDON,
        actor=user,
        target=str(canary),
        detail={"canary": canary.pk, "reason": reason},
    )
    transaction.on_commit(site_view_invalidate)
    return canary
