"""Quotas: limits on what a project, or one member of it, holds in a queue.

The table keeps the name it had when quotas were the organisation's (portal_quota)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import TextChoices

from portal.models import Membership, Project


class Quota(models.Model):
    """What a project (or one user in it) may hold at once in one queue (docs/policy.md)."""

    class Resource(TextChoices):
        GPUS = "gpus", "GPUs"
        CPUS = "cpus", "CPUs"
        TASKS = "tasks", "Running tasks"
        GPU_HOURS = "gpu_hours", "GPU-hours per period"
        CORE_HOURS = "core_hours", "Core-hours per period"

    class Period(TextChoices):
        DAY = "day", "Day"
        WEEK = "week", "Week"
        MONTH = "month", "Month"

    class OverQuota(TextChoices):
        QUEUE = "queue", "Wait until there is room"
        REJECT = "reject", "Refuse the task"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="quotas")
    queue = models.ForeignKey("scheduling.Queue", on_delete=models.CASCADE, related_name="quotas")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="quotas",
        null=True,
        blank=True,
        help_text="Empty: the whole project. Set: this member only.",
    )
    resource = models.CharField(max_length=10, choices=Resource.choices)
    limit = models.PositiveIntegerField()
    period = models.CharField(
        max_length=5,
        choices=Period.choices,
        default=Period.MONTH,
        help_text="For GPU-hours and core-hours: the budget's period (site time zone).",
    )
    over_quota = models.CharField(max_length=8, choices=OverQuota.choices, default=OverQuota.QUEUE)
    # Lending between the projects of one queue (its cohort): `limit` is the nominal quota.
    borrowing_limit = models.PositiveIntegerField(
        default=0,
        help_text="How far over its limit the project may go on other projects' unused "
        "quota in this queue; 0: never. GPUs, CPUs or running tasks, whole project only.",
    )
    lending_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How much of its unused quota other projects may borrow; empty: all of it. "
        "The rest is kept for the project's own next task.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "portal_quota"
        ordering = ["project", "queue", "user", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "queue", "resource"],
                condition=models.Q(user__isnull=True),
                name="one_project_quota_per_resource",
            ),
            models.UniqueConstraint(
                fields=["project", "queue", "user", "resource"],
                condition=models.Q(user__isnull=False),
                name="one_user_quota_per_resource",
            ),
        ]

    def __str__(self) -> str:
        who = f"{self.user} in {self.project}" if self.user_id else str(self.project)
        return f"{who}: {self.limit} {self.resource} in {self.queue}"

    def clean(self) -> None:
        problem = lending_problem(
            self.resource, self.user_id is not None, self.borrowing_limit, self.lending_limit
        )
        if problem is not None:
            raise ValidationError({problem[0]: problem[1]})
        if (
            self.user_id
            and self.project_id
            and not Membership.objects.filter(
                user_id=self.user_id, project_id=self.project_id
            ).exists()
        ):
            raise ValidationError({"user": "must be a member of the project"})


LENDABLE = ("gpus", "cpus", "tasks")


def lending_problem(
    resource: str, for_member: bool, borrowing_limit: int, lending_limit: int | None
) -> tuple[str, str] | None:
    """(field, what is wrong) when a quota's lending limits do not fit it; None when they do.
    Only a whole project's quota of GPUs, CPUs or running tasks lends and borrows."""
    if not borrowing_limit and lending_limit is None:
        return None
    field = "borrowing_limit" if borrowing_limit else "lending_limit"
    if for_member:
        return field, "only a whole project's quota lends or borrows, not a member's"
    if resource not in LENDABLE:
        return field, f"only a quota of {', '.join(LENDABLE)} lends or borrows, not {resource}"
    return None
