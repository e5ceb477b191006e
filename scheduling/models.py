from __future__ import annotations

import secrets
import string

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from scheduling.decisions import levels, lifecycle
from scheduling.decisions.order import ScheduleError, parse_weight_schedule
from scheduling.spec import FAIL_ACTIONS, PRIORITIES, TASK_TYPES


class Pool(models.Model):
    class Kind(models.TextChoices):
        CPU_HPC = "cpu-hpc", "CPU HPC"
        GPU_TRAINING = "gpu-training", "GPU training"
        INFERENCE = "inference", "Inference / elastic"
        SANDBOX = "sandbox", "Sandbox"

    name = models.SlugField(max_length=63, unique=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    backend = models.CharField(
        max_length=63, help_text="Alias in settings.COMPUTE_BACKENDS that runs this pool's work."
    )
    labels = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    class State(models.TextChoices):
        UP = "up", "Up"
        DRAINED = "drained", "Drained"
        DOWN = "down", "Down"

    name = models.CharField(max_length=63, unique=True)
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="nodes")
    cpus = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    gpus = models.PositiveIntegerField(default=0)
    gpu_model = models.CharField(max_length=63, blank=True)
    switch = models.CharField(max_length=63, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.UP)
    health = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["pool", "name"]

    def __str__(self) -> str:
        return self.name


class Queue(models.Model):
    class Policy(models.TextChoices):
        FAIRSHARE = "fairshare", "Fair-share"
        PRIORITY_QUOTA = "priority-quota", "Priority with quota"
        ELASTIC = "elastic", "Elastic"

    class Allocation(models.TextChoices):
        WHOLE_NODE = "whole-node", "Whole nodes"
        PACK = "pack", "Pack onto few nodes"

    name = models.SlugField(max_length=63, unique=True)
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="queues")
    policy = models.CharField(max_length=16, choices=Policy.choices, default=Policy.FAIRSHARE)
    task_types = models.JSONField(
        default=list,
        blank=True,
        help_text=f"Types this queue takes, from {TASK_TYPES}; empty = any.",
    )
    max_walltime_s = models.PositiveIntegerField(null=True, blank=True)
    default_walltime_s = models.PositiveIntegerField(null=True, blank=True)
    requires_estimate = models.BooleanField(default=False)
    preemptible = models.BooleanField(default=False)
    allocation = models.CharField(
        max_length=16, choices=Allocation.choices, default=Allocation.PACK
    )
    cpu_oversubscription = models.PositiveSmallIntegerField(default=1)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    idle_scale_in_s = models.PositiveIntegerField(null=True, blank=True)
    weight_schedule = models.JSONField(
        default=list,
        blank=True,
        help_text='Time-of-day weights by task type, e.g. [{"from": "08:00", "to": "20:00", '
        '"weights": {"agent": 2}}] (docs/policy.md).',
    )
    admins = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        related_name="administered_queues",
        blank=True,
        help_text="Queue admins: they decide this queue's priority-raise requests.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        try:
            parse_weight_schedule(self.weight_schedule, TASK_TYPES)
        except ScheduleError as exc:
            raise ValidationError({"weight_schedule": str(exc)}) from None


class LevelRule(models.Model):
    """How a task type's level moves while it waits (docs/policy.md)."""

    LEVELS = [(0, "low"), (1, "medium"), (2, "high")]

    task_type = models.CharField(max_length=32, choices=[(t, t) for t in TASK_TYPES])
    queue = models.ForeignKey(
        Queue,
        on_delete=models.CASCADE,
        related_name="level_rules",
        null=True,
        blank=True,
        help_text="Empty: any queue (a queue's own rule for the type wins).",
    )
    start_level = models.PositiveSmallIntegerField(choices=LEVELS, default=1)
    step = models.SmallIntegerField(choices=[(-1, "drops"), (0, "stays"), (1, "rises")], default=0)
    every_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="Seconds of waiting before a move."
    )
    limit_level = models.PositiveSmallIntegerField(
        choices=LEVELS, null=True, blank=True, help_text="Where moves stop."
    )
    repeat = models.BooleanField(default=False, help_text="Move every period, not only once.")

    class Meta:
        ordering = ["task_type", "queue"]
        constraints = [
            models.UniqueConstraint(
                fields=["task_type"],
                condition=models.Q(queue__isnull=True),
                name="one_general_level_rule_per_type",
            ),
            models.UniqueConstraint(
                fields=["task_type", "queue"],
                condition=models.Q(queue__isnull=False),
                name="one_level_rule_per_type_and_queue",
            ),
        ]

    def __str__(self) -> str:
        return self.as_rule().describe() + (f" (queue {self.queue})" if self.queue_id else "")

    def as_rule(self) -> levels.LevelRule:
        return levels.LevelRule(
            task_type=self.task_type,
            queue=self.queue.name if self.queue_id else None,
            start=self.start_level,
            step=self.step,
            every_s=self.every_s,
            limit=self.limit_level,
            repeat=self.repeat,
        )

    def clean(self) -> None:
        if self.step and not self.every_s:
            raise ValidationError({"every_s": "a rule that moves needs a period"})


class ClassifierSettings(models.Model):
    """The thresholds that classify a task without a type; one row (docs/policy.md)."""

    many_gpus = models.PositiveIntegerField(default=2, help_text="At least this many GPUs …")
    long_estimate_s = models.PositiveIntegerField(
        default=2 * 3600, help_text="… and an estimate over this many seconds: training."
    )
    many_cpus = models.PositiveIntegerField(
        default=64, help_text="No GPU and at least this many CPUs: HPC."
    )
    short_s = models.PositiveIntegerField(
        default=30 * 60, help_text="A small task shorter than this many seconds: agent."
    )
    small_cpus = models.PositiveIntegerField(default=4, help_text="Small: at most this many CPUs")
    small_gpus = models.PositiveIntegerField(default=0, help_text="… and this many GPUs.")

    class Meta:
        verbose_name_plural = "classifier settings"

    def __str__(self) -> str:
        return "classifier thresholds"

    def save(self, *args, **kwargs):
        self.pk = 1  # one row
        super().save(*args, **kwargs)


class RoutingRule(models.Model):
    order = models.PositiveIntegerField()
    match_type = models.CharField(
        max_length=32, blank=True, choices=[(t, t) for t in TASK_TYPES], help_text="Empty = any."
    )
    min_gpus = models.PositiveIntegerField(null=True, blank=True)
    min_cpus = models.PositiveIntegerField(null=True, blank=True)
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="rules")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["order"]

    def __str__(self) -> str:
        return f"#{self.order} {self.match_type or 'any'} → {self.queue}"


class TaskState(models.TextChoices):
    PENDING = "pending", "Pending"
    WAITING = "waiting", "Waiting"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMEOUT = "timeout", "Timed out"
    SKIPPED = "skipped", "Skipped"


# The same strings as the pure lifecycle rules (scheduling/decisions/lifecycle.py).
class Hold(models.TextChoices):
    """What holds a waiting task."""

    DEPENDENCY = "dependency", "Its dependencies"
    TRIGGER = "trigger", "Its trigger file"
    QUOTA = "quota", "A quota"


TERMINAL_STATES = frozenset(TaskState(s) for s in lifecycle.TERMINAL)
ACTIVE_STATES = frozenset(TaskState(s) for s in lifecycle.ACTIVE)


def new_key_salt() -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(6))


class WorkflowState(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Workflow(models.Model):
    """A DAG of tasks submitted as one descriptor."""

    project = models.ForeignKey(
        "portal.Project", on_delete=models.PROTECT, related_name="workflows"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workflows"
    )
    name = models.CharField(max_length=63)
    descriptor = models.TextField(help_text="The descriptor as submitted, verbatim.")
    descriptor_format = models.CharField(max_length=8)
    state = models.CharField(
        max_length=16, choices=WorkflowState.choices, default=WorkflowState.RUNNING
    )
    reason = models.TextField(blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.name} (workflow #{self.pk})"


class Task(models.Model):
    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="tasks")
    workflow = models.ForeignKey(
        Workflow, on_delete=models.CASCADE, related_name="tasks", null=True, blank=True
    )
    depends_on = models.ManyToManyField(
        "self", symmetrical=False, related_name="dependants", blank=True
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="tasks"
    )
    name = models.CharField(max_length=63)
    descriptor = models.TextField(help_text="The descriptor as submitted, verbatim.")
    descriptor_format = models.CharField(max_length=8)
    spec = models.JSONField(help_text="The validated TaskSpec.")
    declared_type = models.CharField(max_length=32, blank=True)
    type = models.CharField(max_length=32)
    classify_reason = models.TextField()
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="tasks")
    routing_reason = models.TextField()
    backend = models.CharField(max_length=63)
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.PENDING)
    reason = models.TextField(blank=True, help_text="Why the task waits, or why it ended.")
    priority = models.CharField(
        max_length=8,
        choices=[(p, p) for p in PRIORITIES],
        default="normal",
        help_text="What the descriptor asked for; above normal it becomes a request.",
    )
    # The level it has now (0 low, 1 medium, 2 high) and why; the backend's number for it.
    level = models.PositiveSmallIntegerField(default=1)
    level_reason = models.TextField(blank=True)
    priority_value = models.PositiveBigIntegerField(default=0)
    # Since when it could run: the clock of its level rule.
    ready_at = models.DateTimeField(null=True, blank=True)
    # Counted against its quotas from admission until it ends.
    admitted = models.BooleanField(default=False)
    # What holds a waiting task: its dependencies, a trigger file, or a quota.
    hold = models.CharField(max_length=16, choices=Hold.choices, blank=True)
    # What it would hold, for quotas (its spec's resources, kept where SQL can sum them).
    gpus = models.PositiveIntegerField(default=0)
    cpus = models.PositiveIntegerField(default=1)
    retry_count = models.PositiveSmallIntegerField(default=0)
    fail_action = models.CharField(
        max_length=8, choices=[(a, a) for a in FAIL_ACTIONS], default="abort"
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    backend_id = models.CharField(max_length=128, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # A dispatcher owns the task until this time; another may take over after it passes.
    dispatch_lease_until = models.DateTimeField(null=True, blank=True)
    wait_timeout_s = models.PositiveIntegerField(null=True, blank=True)
    waiting_since = models.DateTimeField(null=True, blank=True)
    trigger_file = models.CharField(max_length=4096, blank=True)
    # A retried attempt is not dispatched before this time (backoff).
    not_before = models.DateTimeField(null=True, blank=True)
    # How many dispatchers have claimed the current attempt. On the first claim no job can
    # exist under the attempt's key yet, so the backend look-up before submit is skipped.
    dispatch_claims = models.PositiveSmallIntegerField(default=0)
    key_salt = models.CharField(max_length=8, default=new_key_salt, editable=False)
    # A cancel asked for while a backend job exists; a worker carries it out (engine/jobs.py).
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.CharField(max_length=150, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["state", "backend"], name="task_state_backend"),
            models.Index(fields=["project", "-id"], name="task_project_recent"),
            models.Index(fields=["queue", "admitted", "state"], name="task_quota_use"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def key(self) -> str:
        """The current attempt's job key: unique, in the safe alphabet, names the backend job."""
        return attempt_key(self.pk, self.attempts, self.key_salt)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def cancelling(self) -> bool:
        """A cancel was asked for and a worker has not yet carried it out."""
        return self.cancel_requested_at is not None and not self.is_terminal

    @property
    def display_state(self) -> str:
        return "cancelling" if self.cancelling else self.state


def attempt_key(task_id: int, attempt: int, salt: str) -> str:
    """The job name of one attempt: `sy-<task>-<salt>-<attempt>`, in [a-z0-9-].

    The salt is random per task, so a job left by another portal database (whose task ids
    restart at 1) is never taken for this task's job.
    """
    return f"sy-{task_id}-{salt}-{attempt}"


class Attempt(models.Model):
    """One backend job made for a task; a retried task has several."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="attempt_set")
    number = models.PositiveSmallIntegerField()
    key = models.CharField(max_length=64, unique=True)
    backend_id = models.CharField(max_length=128, blank=True)
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.QUEUED)
    reason = models.TextField(blank=True)
    nodes = models.JSONField(default=list, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["task", "number"]
        constraints = [
            models.UniqueConstraint(fields=["task", "number"], name="one_row_per_attempt")
        ]

    def __str__(self) -> str:
        return f"{self.task_id} attempt {self.number}"


class TaskEvent(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.task_id}: {self.from_state or '∅'} → {self.to_state}"
