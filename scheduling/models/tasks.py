"""Work: workflows, tasks, their attempts and events."""

from __future__ import annotations

import secrets
import string

from django.conf import settings
from django.db import models
from django.db.models import TextChoices

from scheduling.decisions import lifecycle
from scheduling.models.site import Queue
from scheduling.spec import FAIL_ACTIONS, PRIORITIES


# The states are named once, in the pure lifecycle rules (scheduling/decisions/lifecycle.py);
# here they get their labels.
class TaskState(TextChoices):
    PENDING = lifecycle.PENDING, "Pending"
    WAITING = lifecycle.WAITING, "Waiting"
    QUEUED = lifecycle.QUEUED, "Queued"
    RUNNING = lifecycle.RUNNING, "Running"
    SUCCEEDED = lifecycle.SUCCEEDED, "Succeeded"
    FAILED = lifecycle.FAILED, "Failed"
    CANCELLED = lifecycle.CANCELLED, "Cancelled"
    TIMEOUT = lifecycle.TIMEOUT, "Timed out"
    SKIPPED = lifecycle.SKIPPED, "Skipped"


class Hold(TextChoices):
    """What holds a waiting task."""

    DEPENDENCY = "dependency", "Its dependencies"
    TRIGGER = "trigger", "Its trigger file"
    QUOTA = "quota", "A quota"


TERMINAL_STATES = frozenset(TaskState(s) for s in lifecycle.TERMINAL)
ACTIVE_STATES = frozenset(TaskState(s) for s in lifecycle.ACTIVE)
# Not started yet: the states a level still orders (the policy pass relevels only these).
UNSTARTED_STATES = frozenset({TaskState.PENDING, TaskState.WAITING, TaskState.QUEUED})


_SALT_ALPHABET = string.ascii_lowercase + string.digits


def new_key_salt() -> str:
    """Six random base-36 characters from one draw (a draw per character read the system's
    random source six times: a few percent of a submission)."""
    n = secrets.randbelow(36**6)
    return "".join(_SALT_ALPHABET[(n // 36**i) % 36] for i in range(6))


class WorkflowState(TextChoices):
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
    # What of other projects' unused quota it was admitted on ("16 GPUs"); empty: none.
    # Borrowed work yields to a lender by preemption only where its queue preempts.
    borrowed = models.CharField(max_length=32, blank=True, default="")
    # What holds a waiting task: its dependencies, a trigger file, or a quota.
    hold = models.CharField(max_length=16, choices=Hold.choices, blank=True)
    # Attempts ended by preemption, lease reclaim or a start-up resubmit: not failures, so
    # not counted against retry_count (docs/capacity.md).
    preemptions = models.PositiveSmallIntegerField(default=0)
    # What it would hold, for quotas (its spec's resources, kept where SQL can sum them).
    gpus = models.PositiveIntegerField(default=0)
    cpus = models.PositiveIntegerField(default=1)
    retry_count = models.PositiveSmallIntegerField(default=0)
    fail_action = models.CharField(
        max_length=8, choices=[(a, a) for a in FAIL_ACTIONS], default="abort"
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    canary = models.ForeignKey(
        "scheduling.Canary",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="tasks",
        help_text="Routed and levelled by this canary's rules, not the current ones.",
    )
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
    # The work it is a run of (its user, project and command: decisions/predict.py) and how
    # long it was predicted to run when it was queued, from that work's last runs; it plans,
    # the walltime still ends the job (docs/predictions.md).
    runtime_key = models.CharField(max_length=32, blank=True)
    predicted_runtime_s = models.PositiveIntegerField(null=True, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The last runs of a task's work, read when it is queued.
            models.Index(fields=["runtime_key", "-ended_at"], name="task_runtime_history"),
            models.Index(fields=["state", "backend"], name="task_state_backend"),
            models.Index(fields=["project", "-id"], name="task_project_recent"),
            models.Index(fields=["queue", "admitted", "state"], name="task_quota_use"),
            # The dashboards' waits of the week.
            models.Index(fields=["started_at"], name="task_started"),
            # The quota-held tasks of a queue, looked up each time an admitted task ends:
            # without it the look-up reads every task of the queue (docs/policy.md).
            models.Index(
                fields=["queue"],
                condition=models.Q(state="waiting", hold="quota"),
                name="task_quota_held",
            ),
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


class AttemptState(TextChoices):
    """An attempt's states: a task's, plus `preempted` (ended to make room, then requeued)."""

    QUEUED = lifecycle.QUEUED, "Queued"
    RUNNING = lifecycle.RUNNING, "Running"
    SUCCEEDED = lifecycle.SUCCEEDED, "Succeeded"
    FAILED = lifecycle.FAILED, "Failed"
    CANCELLED = lifecycle.CANCELLED, "Cancelled"
    TIMEOUT = lifecycle.TIMEOUT, "Timed out"
    SKIPPED = lifecycle.SKIPPED, "Skipped"
    PREEMPTED = lifecycle.PREEMPTED, "Preempted"


class Attempt(models.Model):
    """One backend job made for a task; a retried task has several."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="attempt_set")
    number = models.PositiveSmallIntegerField()
    key = models.CharField(max_length=64, unique=True)
    backend_id = models.CharField(max_length=128, blank=True)
    state = models.CharField(
        max_length=16, choices=AttemptState.choices, default=AttemptState.QUEUED
    )
    log_path = models.CharField(
        max_length=1024,
        blank=True,
        help_text="The file the job's output is written to, as its backend said at submission "
        "(the portal reads the log there).",
    )
    reason = models.TextField(blank=True)
    nodes = models.JSONField(default=list, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    cpu_ms = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="CPU time its processes used, from the backend's own accounting (metered).",
    )
    cpu_elapsed_ms = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="… over this much elapsed time (the runs measured)."
    )
    # What its GPUs did, sampled from nvidia-smi while it ran (docs/operations.md, "GPU use
    # and GPU health"); null where nothing was sampled (no GPU, no nvidia-smi).
    gpu_samples = models.PositiveIntegerField(
        null=True, blank=True, help_text="Samples of its GPUs' use taken while it ran."
    )
    gpu_busy = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="GPUs its processes were seen using."
    )
    gpu_util_mean = models.FloatField(
        null=True, blank=True, help_text="Mean utilisation (%) of the GPUs it used."
    )
    gpu_util_peak = models.FloatField(
        null=True, blank=True, help_text="Highest utilisation (%) of one of them."
    )
    gpu_memory_peak_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most GPU memory (MiB) its processes held at once."
    )
    pull_seconds = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds its job waited for its image to be pulled onto its node(s), apart "
        "from its run time and walltime (0: the image was cached; null: no image).",
    )
    pull_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="Bytes that pull moved (0: the image was cached)."
    )

    class Meta:
        ordering = ["task", "number"]
        constraints = [
            models.UniqueConstraint(fields=["task", "number"], name="one_row_per_attempt")
        ]
        # The dashboards: preemptions of the week, what was measured lately.
        indexes = [models.Index(fields=["state", "ended_at"], name="attempt_state_ended")]

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
