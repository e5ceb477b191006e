"""Capacity that moves: node leases between pools, their schedules, and alerts (docs/capacity.md)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import TextChoices
from django.utils.module_loading import import_string

from scheduling.models.site import Node, Pool, Queue
from scheduling.models.tasks import Task


class LeaseSchedule(models.Model):
    """Every day from `start` for `duration_s`, lend `count` idle nodes of `pool` to `queue`."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="lease_schedules")
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="lease_schedules")
    count = models.PositiveIntegerField(help_text="How many idle nodes to lend.")
    start = models.TimeField(help_text="Site time (SWITCHYARD_SITE_TIMEZONE).")
    duration_s = models.PositiveIntegerField(help_text="How long each lease lasts.")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["start"]

    def __str__(self) -> str:
        return f"{self.count} × {self.pool} → {self.queue} daily at {self.start:%H:%M}"

    def clean(self) -> None:
        if self.queue_id and self.pool_id and self.queue.pool_id == self.pool_id:
            raise ValidationError({"queue": "lend to a queue of another pool"})
        longest = settings.SWITCHYARD_LEASE_MAX_HOURS * 3600
        if self.duration_s and self.duration_s > longest:
            raise ValidationError({"duration_s": f"at most {longest} s"})


class NodeLease(models.Model):
    """Nodes of one pool lent to another pool's queue until a time, then taken back."""

    class State(TextChoices):
        ACTIVE = "active", "Active"
        ENDED = "ended", "Ended (reclaimed)"

    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="leases_out")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="leases_in")
    nodes = models.ManyToManyField(Node, related_name="leases")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.ACTIVE)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Empty: made by a schedule.",
    )
    schedule = models.ForeignKey(
        LeaseSchedule, on_delete=models.SET_NULL, null=True, blank=True, related_name="leases"
    )
    reason = models.TextField(blank=True)
    reclaimed_at = models.DateTimeField(null=True, blank=True)
    requeued = models.PositiveIntegerField(default=0, help_text="Tasks requeued at reclaim.")

    class Prepull(TextChoices):
        # docs/containers.md, "Pre-pulling": the lease takes effect once its nodes have the
        # borrowing pool's warm images, or when the wait times out.
        NONE = "", "Nothing to pull"
        WAITING = "waiting", "Pulling the borrower's warm images"
        DONE = "done", "Images pulled"
        FAILED = "failed", "Some images could not be pulled"
        TIMED_OUT = "timed-out", "Started before the images were pulled"
        NOT_SUPPORTED = "unsupported", "The backend does not pre-pull"

    prepull = models.CharField(max_length=16, choices=Prepull.choices, default="", blank=True)
    prepull_note = models.TextField(blank=True, help_text="Each image's pre-pull, as it went.")

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"lease #{self.pk}: {self.pool} → {self.queue} until {self.ends_at:%Y-%m-%d %H:%M}"

    @staticmethod
    def in_effect() -> models.Q:
        """The leases whose nodes serve the borrower now: active, and not waiting for the
        pre-pull of the borrower's images."""
        return models.Q(state=NodeLease.State.ACTIVE) & ~models.Q(prepull=NodeLease.Prepull.WAITING)


class Alert(models.Model):
    """Something an operator should know: a node drained, a task that does not start."""

    class Kind(TextChoices):
        NODE = "node", "Node health"
        STARTUP = "startup", "Start-up timeout"
        LEASE = "lease", "Lease"
        USAGE = "usage", "Usage reconciliation"

    at = models.DateTimeField(auto_now_add=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    subject = models.CharField(max_length=200)
    message = models.TextField()
    node = models.ForeignKey(
        Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )
    task = models.ForeignKey(
        Task, on_delete=models.SET_NULL, null=True, blank=True, related_name="alerts"
    )

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.kind}: {self.subject}"


class LoadSample(models.Model):
    """A queue's load at one moment, taken every minute by a worker: the admins' dashboard
    draws utilisation and queue depth over time from these (docs/console.md)."""

    at = models.DateTimeField(db_index=True)
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="samples")
    waiting = models.PositiveIntegerField(help_text="pending, waiting and queued tasks")
    running = models.PositiveIntegerField()
    cpus_busy = models.PositiveIntegerField()
    gpus_busy = models.PositiveIntegerField()

    class Meta:
        ordering = ["at", "queue"]

    def __str__(self) -> str:
        return (
            f"{self.at:%Y-%m-%d %H:%M} {self.queue}: {self.waiting} waiting, {self.running} running"
        )


class NodeImageCache(models.Model):
    """What one image cache on the nodes holds, as its backend last listed it (the engine's
    pre-pull pass records it; the Capacity page and the operator dashboard read it, never the
    backend). A local backend's nodes share one cache (its root's): one row names them all."""

    backend = models.CharField(max_length=63)
    nodes = models.JSONField(default=list, help_text="The nodes this cache serves.")
    images = models.JSONField(
        default=list,
        help_text="[{reference, digest, bytes, pull_bytes, last_used}], newest use first.",
    )
    cache_bytes = models.PositiveBigIntegerField(default=0)
    pulled_bytes = models.PositiveBigIntegerField(
        default=0, help_text="Bytes every pull into this cache moved, since it was made."
    )
    pulls = models.PositiveIntegerField(default=0)
    at = models.DateTimeField(help_text="When the backend listed it.")

    class Meta:
        ordering = ["backend", "id"]

    def __str__(self) -> str:
        return f"{self.backend}: {', '.join(self.nodes)} ({len(self.images)} images)"


class PoolBorrowing(models.Model):
    """Backfill across pools, per pair: CPU jobs of `borrower`'s queues may run on the idle
    cores of `lender`'s nodes, by their walltime, before the lender's next reservation and
    never on a GPU (docs/policy.md, "Backfill across pools"). Off until a platform admin
    switches it on."""

    borrower = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="borrows_from")
    lender = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="lends_to")
    enabled = models.BooleanField(
        default=False, help_text="On: the borrower's CPU jobs may use the lender's idle cores."
    )
    cpus_per_free_gpu = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Cores a lender's node keeps for each of its free GPUs (and memory in the "
        "node's proportion), which borrowed work never takes. Empty: the node's own cores "
        "per GPU, so that an idle GPU node lends nothing.",
    )

    class Meta:
        ordering = ["borrower__name", "lender__name"]
        constraints = [
            models.UniqueConstraint(fields=["borrower", "lender"], name="one_borrowing_per_pair")
        ]

    def __str__(self) -> str:
        state = "on" if self.enabled else "off"
        return f"{self.borrower} may use {self.lender}'s idle cores: {state}"

    def clean(self) -> None:
        if not (self.borrower_id and self.lender_id):
            return
        if self.borrower_id == self.lender_id:
            raise ValidationError({"lender": "expected another pool than the borrower"})
        if not self.enabled:
            return
        if self.lender.backend != self.borrower.backend:
            raise ValidationError(
                {
                    "lender": f"expected a pool of the borrower's backend "
                    f"{self.borrower.backend!r}, got one of {self.lender.backend!r}"
                }
            )
        if not backfills_across_pools(self.borrower.backend):
            raise ValidationError(
                {
                    "enabled": f"backend {self.borrower.backend!r} does not backfill across "
                    "pools (only the local backend does; docs/policy.md)"
                }
            )


def backfills_across_pools(alias: str) -> bool:
    """Whether the backend of `alias` places work on another pool's nodes (the local backend;
    on Slurm a job runs in its own partition)."""
    config = settings.COMPUTE_BACKENDS.get(alias)
    if config is None:
        return False
    return bool(getattr(import_string(config["BACKEND"]), "backfills_across_pools", False))
