"""A platform admin keeps the nightly lease schedules on the Capacity page (docs/capacity.md).

Each save or removal is a configuration version with its reason (portal/history.py watches
the model), validated as the model validates it; the engine's next pass follows.
"""

from __future__ import annotations

from datetime import time

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction

from portal import audit, roles
from portal.errors import ApplicationError, ErrorItem
from scheduling.models import LeaseSchedule, Pool, Queue
from scheduling.selectors import site_view_invalidate


def _check(user: User, reason: str) -> str:
    if not roles.is_platform_admin(user):
        raise ApplicationError("only a platform admin keeps lease schedules", status=403)
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError("say why you change the schedule", field="reason")
    return reason


@transaction.atomic
def lease_schedule_save(
    *,
    user: User,
    schedule: LeaseSchedule | None,
    pool: Pool,
    queue: Queue,
    count: int,
    start: time,
    duration_s: int,
    enabled: bool,
    reason: str,
) -> LeaseSchedule:
    """Create (`schedule` None) or change a schedule: every day from `start` for
    `duration_s`, lend `count` idle nodes of `pool` to `queue`."""
    reason = _check(user, reason)
    found = schedule or LeaseSchedule()
    found.pool, found.queue, found.count = pool, queue, count
    found.start, found.duration_s, found.enabled = start, duration_s, enabled
    try:
        found.full_clean()
    except ValidationError as exc:
        errors = [
            ErrorItem(field=name, message=" ".join(messages), got=None)
            for name, messages in exc.message_dict.items()
        ]
        raise ApplicationError("invalid lease schedule", errors=errors) from None
    with audit.because(reason):
        found.save()
    transaction.on_commit(site_view_invalidate)
    return found


@transaction.atomic
def lease_schedule_delete(*, user: User, schedule: LeaseSchedule, reason: str) -> None:
    """Remove a schedule; leases it already opened run to their end."""
    reason = _check(user, reason)
    with audit.because(reason):
        schedule.delete()
    transaction.on_commit(site_view_invalidate)
