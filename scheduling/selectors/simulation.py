"""Reads of the console's what-if runs: operators (platform admins, queue admins) see every run;
for anyone else they do not exist (a 404). docs/simulation.md."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404

from portal import roles
from portal.selectors import checked_pk
from scheduling.models import SimulationRun


def simulation_list_for_user(user: AbstractBaseUser) -> QuerySet[SimulationRun]:
    """Every run, newest first, for an operator; none for anyone else."""
    runs = SimulationRun.objects.select_related("created_by").order_by("-id")
    return runs if roles.is_operator(user) else runs.none()


def simulation_get_for_user(user: AbstractBaseUser, pk: int | str) -> SimulationRun:
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
