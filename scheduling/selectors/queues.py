"""Reads of queues for the pages and the API: by name, all of them, their names (and the
pools')."""

from __future__ import annotations

from django.db.models import QuerySet

from scheduling.models import Pool, Queue


def queue_by_name(name: str) -> Queue | None:
    return Queue.objects.select_related("pool").filter(name=name).first()


def queue_list() -> QuerySet[Queue]:
    """Every queue with its pool and its admins."""
    return Queue.objects.select_related("pool").prefetch_related("admins")


def queue_list_by_name() -> QuerySet[Queue]:
    return Queue.objects.select_related("pool").order_by("name")


def queue_names() -> list[str]:
    return list(Queue.objects.order_by("name").values_list("name", flat=True))


def pool_names() -> list[str]:
    return list(Pool.objects.order_by("name").values_list("name", flat=True))
