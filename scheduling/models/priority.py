"""Priority requests: a researcher asks for a higher level, a queue's admins decide.

The table keeps the name it had when requests were the organisation's
(portal_priorityrequest)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import TextChoices

from portal.models import Project


class PriorityRequest(models.Model):
    """A researcher's request for a higher level, for one task or a project's tasks in a
    queue, until a time; approved or rejected by the queue's admins or a platform admin."""

    class State(TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        EXPIRED = "expired", "Expired"

    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="priority_requests"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="priority_requests")
    queue = models.ForeignKey(
        "scheduling.Queue", on_delete=models.CASCADE, related_name="priority_requests"
    )
    task = models.ForeignKey(
        "scheduling.Task",
        on_delete=models.CASCADE,
        related_name="priority_requests",
        null=True,
        blank=True,
        help_text="Empty: every task of the project in the queue.",
    )
    level = models.PositiveSmallIntegerField(choices=[(0, "low"), (1, "medium"), (2, "high")])
    reason = models.TextField()
    until = models.DateTimeField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        related_name="+",
        null=True,
        blank=True,
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="When it expired.")

    class Meta:
        db_table = "portal_priorityrequest"
        ordering = ["-id"]
        indexes = [models.Index(fields=["state", "until"], name="priority_request_live")]
        constraints = [
            # Two pending requests for one task could only be decided twice.
            models.UniqueConstraint(
                fields=["task"],
                condition=models.Q(state="pending"),
                name="one_pending_priority_request_per_task",
            )
        ]

    def __str__(self) -> str:
        what = f"task #{self.task_id}" if self.task_id else f"{self.project} in {self.queue}"
        return f"#{self.pk} {what} → {self.get_level_display()} ({self.state})"
