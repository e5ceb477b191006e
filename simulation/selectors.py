"""Reads of the console's what-if runs (docs/simulation.md, docs/security.md).

Who sees a run follows from what it read, as its stored parameters say:

- a platform admin: every run;
- a queue admin: the runs they started; the validation-day and launch-mix runs (a model of the default
  site: no portal data); and the history replays whose queues are all theirs. Not a replay
  of the whole site, nor of another queue, nor another operator's uploaded trace;
- anyone else: none (a 404).
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.http import Http404

from portal import roles
from portal.parsing import checked_pk
from scheduling.models import Queue
from simulation.models import SimulationRun

# What a run can model and the states it goes through, for the pages to offer and show.
Workload = SimulationRun.Workload
RunState = SimulationRun.State
MODEL_ONLY = (Workload.DAY, Workload.BURST)


def simulation_list_for_user(user: User) -> QuerySet[SimulationRun]:
    """The runs the user may see, newest first."""
    runs = SimulationRun.objects.select_related("created_by").order_by("-id")
    if roles.is_platform_admin(user):
        return runs
    mine = roles.administered_queue_ids(user)
    if not mine:
        return runs.none()
    names = set(Queue.objects.filter(pk__in=mine).values_list("name", flat=True))
    # Runs are started by hand, a few a day: the replays' scopes are read here, not indexed.
    replays = SimulationRun.objects.filter(workload=SimulationRun.Workload.HISTORY)
    within = [
        pk
        for pk, parameters in replays.values_list("pk", "parameters")
        if _queues_of(parameters) and _queues_of(parameters) <= names
    ]
    return runs.filter(Q(workload__in=MODEL_ONLY) | Q(created_by=user) | Q(pk__in=within))


def replayable_queues(user: User) -> list[str]:
    """The queues whose history this operator may replay: every queue for a platform admin
    (or none named: the whole site), their own for a queue admin."""
    queues = Queue.objects.order_by("name")
    if not roles.is_platform_admin(user):
        queues = queues.filter(pk__in=roles.administered_queue_ids(user))
    return list(queues.values_list("name", flat=True))


def _queues_of(parameters: object) -> set[str]:
    """The queues a history replay read; empty for the whole site."""
    queues = parameters.get("queues") if isinstance(parameters, dict) else None
    return {q for q in queues if isinstance(q, str)} if isinstance(queues, list) else set()


def simulation_get_for_user(user: User, pk: int | str) -> SimulationRun:
    """One run the user may see (a 404 otherwise)."""
    try:
        return simulation_list_for_user(user).get(pk=checked_pk(pk))
    except (SimulationRun.DoesNotExist, ValueError, TypeError):
        raise Http404("no such simulation") from None


def next_queued_simulation() -> int | None:
    """The oldest run still waiting for a worker."""
    return (
        SimulationRun.objects.filter(state=SimulationRun.State.QUEUED)
        .order_by("id")
        .values_list("id", flat=True)
        .first()
    )
