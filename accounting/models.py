"""Usage records, their daily roll-up, prices, collectors and reconciliations
(docs/accounting.md)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import TextChoices
from django.utils import timezone

from accounting.metrics import METRICS

METRIC_CHOICES = [(m.name, f"{m.label} ({m.unit})") for m in METRICS.values()]


def default_currency() -> str:
    return settings.SWITCHYARD_CURRENCY


class Rate(models.Model):
    """The price of one shown unit of a metric (a core-hour, a GPU-hour …) in one queue, or
    in every queue without its own, from `valid_from` until `valid_until`.

    A record is charged at the rate valid when its usage ended; a new price applies from its
    date on and never reprices what was already charged."""

    queue = models.ForeignKey(
        "scheduling.Queue",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="rates",
        help_text="Empty: every queue without a rate of its own (and collectors' samples).",
    )
    metric = models.CharField(max_length=16, choices=METRIC_CHOICES)
    # Ten places: a GiB-hour of storage costs a few ten-thousandths.
    price = models.DecimalField(max_digits=20, decimal_places=10)
    currency = models.CharField(max_length=3, default=default_currency)
    valid_from = models.DateTimeField()
    valid_until = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["queue__name", "metric", "valid_from"]
        indexes = [models.Index(fields=["metric", "valid_from"])]

    def __str__(self) -> str:
        unit = METRICS[self.metric].unit.removesuffix("s")
        where = self.queue.name if self.queue is not None else "any queue"
        return f"{self.price} {self.currency} per {unit} in {where} from {self.valid_from:%Y-%m-%d}"

    def clean(self) -> None:
        if self.valid_until is not None and self.valid_until <= self.valid_from:
            raise ValidationError({"valid_until": "must be after valid_from"})
        if self._state.adding and self.valid_from < timezone.now() - timedelta(minutes=5):
            raise ValidationError(
                {"valid_from": "a new price applies from now on: the past stays as charged"}
            )


class UsageRecord(models.Model):
    """What one task attempt used of one metric (or one collector sample), exactly once:
    `key` is unique, so a replay writes nothing new."""

    key = models.CharField(max_length=160, unique=True)
    metric = models.CharField(max_length=16, choices=METRIC_CHOICES)
    quantity = models.BigIntegerField(help_text="In the metric's base unit (docs/accounting.md).")
    charge = models.BigIntegerField(default=0, help_text="Millionths of the rate's currency.")
    rate = models.ForeignKey(Rate, on_delete=models.PROTECT, null=True, blank=True)
    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="usage")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    queue = models.CharField(max_length=63, blank=True)
    pool = models.CharField(max_length=63, blank=True)
    task_type = models.CharField(max_length=32, blank=True)
    task = models.ForeignKey(
        "scheduling.Task", on_delete=models.SET_NULL, null=True, blank=True, related_name="usage"
    )
    attempt = models.ForeignKey(
        "scheduling.Attempt", on_delete=models.SET_NULL, null=True, blank=True
    )
    backend = models.CharField(max_length=63, blank=True)
    job_id = models.CharField(max_length=64, blank=True, help_text="The backend's own job id.")
    source = models.CharField(max_length=16, help_text="The backend kind, or 'collector'.")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    day = models.DateField(help_text="The day the usage ended, in the site's time zone.")
    area = models.CharField(
        max_length=63, blank=True, help_text="The storage area a storage sample measured."
    )
    bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The bytes a storage sample measured (its folder's)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ended_at", "id"]
        indexes = [
            models.Index(fields=["ended_at"]),
            models.Index(fields=["backend", "ended_at"]),
            models.Index(fields=["project", "day"]),
            # The latest measured bytes of a project's folder of an area (its soft quota).
            models.Index(fields=["project", "area", "started_at"], name="usage_storage_latest"),
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.quantity} {METRICS[self.metric].base}"


class UsageDaily(models.Model):
    """The records summed per day and every dimension a report groups by, kept as records
    are written (in the same transaction): reports read this, not the records."""

    day = models.DateField()
    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="+")
    username = models.CharField(max_length=150, blank=True)
    queue = models.CharField(max_length=63, blank=True)
    pool = models.CharField(max_length=63, blank=True)
    task_type = models.CharField(max_length=32, blank=True)
    area = models.CharField(max_length=63, blank=True)
    metric = models.CharField(max_length=16, choices=METRIC_CHOICES)
    quantity = models.BigIntegerField(default=0)
    charge = models.BigIntegerField(default=0)
    records = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "day",
                    "project",
                    "username",
                    "queue",
                    "pool",
                    "task_type",
                    "area",
                    "metric",
                ],
                name="one_usage_row_per_day_and_group_and_area",
            )
        ]
        indexes = [models.Index(fields=["day", "metric"])]

    def __str__(self) -> str:
        return f"{self.day} {self.project_id} {self.queue} {self.metric}: {self.quantity}"


class Metered(models.Model):
    """An attempt whose usage is written (with 0 records if it never ran)."""

    attempt = models.OneToOneField(
        "scheduling.Attempt", on_delete=models.CASCADE, primary_key=True, related_name="metered"
    )
    at = models.DateTimeField(auto_now_add=True)
    runs = models.PositiveSmallIntegerField(default=0)
    records = models.PositiveSmallIntegerField(default=0)

    def __str__(self) -> str:
        return f"attempt {self.attempt_id} metered: {self.records} record(s)"


class Collector(models.Model):
    """A storage or network meter that sends samples with a token of its own; the token
    does nothing but ingest samples (docs/accounting.md)."""

    name = models.SlugField(max_length=63, unique=True)
    token_digest = models.CharField(max_length=64, unique=True, editable=False)
    token_prefix = models.CharField(max_length=8, editable=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name


class Reconciliation(models.Model):
    """One comparison of the portal's records with a backend's own accounting."""

    class Outcome(TextChoices):
        CLEAN = "clean", "Clean"
        DIFFERENCES = "differences", "Differences"
        FAILED = "failed", "Could not run"

    backend = models.CharField(max_length=63)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    ran_at = models.DateTimeField(auto_now_add=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    tolerance = models.DecimalField(max_digits=8, decimal_places=6)
    jobs = models.PositiveIntegerField(default=0, help_text="Jobs the backend accounted.")
    missing = models.PositiveIntegerField(default=0, help_text="In the backend, not billed.")
    extra = models.PositiveIntegerField(default=0, help_text="Billed, not in the backend.")
    duplicate = models.PositiveIntegerField(default=0)
    mismatched = models.PositiveIntegerField(default=0)
    details = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-ran_at", "-id"]

    def __str__(self) -> str:
        return f"{self.backend} {self.period_start:%Y-%m-%d %H:%M}–{self.period_end:%H:%M}: {self.outcome}"

    @property
    def differences(self) -> int:
        return self.missing + self.extra + self.duplicate + self.mismatched


class Allocation(models.Model):
    """A project's granted budget for a period: GPU-hours and core-hours it may use from
    `starts` to `ends` (both days included, in the site's time zone), counted from the same
    usage records as a budget quota. Outside its dates, or with a budget spent, the
    project's new work waits (docs/accounting.md, Allocations)."""

    project = models.ForeignKey(
        "portal.Project", on_delete=models.CASCADE, related_name="allocations"
    )
    name = models.CharField(max_length=100, help_text="What people call it: `materials 2026`.")
    starts = models.DateField()
    ends = models.DateField(help_text="The last day it covers.")
    gpu_hours = models.PositiveIntegerField(
        null=True, blank=True, help_text="Empty: this allocation does not limit GPU-hours."
    )
    core_hours = models.PositiveIntegerField(
        null=True, blank=True, help_text="Empty: this allocation does not limit core-hours."
    )

    class Meta:
        ordering = ["project", "-starts", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="one_allocation_name"),
            models.CheckConstraint(
                condition=models.Q(ends__gte=models.F("starts")),
                name="allocation_ends_after_it_starts",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.starts:%Y-%m-%d}–{self.ends:%Y-%m-%d})"

    def clean(self) -> None:
        if self.starts and self.ends and self.ends < self.starts:
            raise ValidationError({"ends": "must be on or after the day it starts"})


class AllocationRequest(models.Model):
    """A project lead's request for more: GPU-hours and core-hours added to the project's
    current allocation (its end moved to `ends` if later), or, when none is current, a new
    allocation from the day it is approved; a platform admin decides."""

    class State(TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="allocation_requests"
    )
    project = models.ForeignKey(
        "portal.Project", on_delete=models.CASCADE, related_name="allocation_requests"
    )
    allocation = models.ForeignKey(
        Allocation,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="requests",
        help_text="The allocation it added to (set when approved).",
    )
    gpu_hours = models.PositiveIntegerField(default=0, help_text="GPU-hours more.")
    core_hours = models.PositiveIntegerField(default=0, help_text="Core-hours more.")
    ends = models.DateField(null=True, blank=True, help_text="Empty: the end stays.")
    justification = models.TextField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # A second pending request of one project could only be decided twice.
            models.UniqueConstraint(
                fields=["project"],
                condition=models.Q(state="pending"),
                name="one_pending_allocation_request_per_project",
            )
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.project} more allocation ({self.state})"
