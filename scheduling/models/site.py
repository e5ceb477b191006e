"""The site: pools and their nodes, queues, routing and level rules, classifier thresholds."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import TextChoices

from portal.models import validate_slug
from scheduling import host
from scheduling.decisions import levels
from scheduling.decisions.devices import (
    DEFAULT_CONTROL_DEVICES,
    DEFAULT_GPU_DEVICE,
    DeviceFiles,
    control_devices_error,
    device_files,
    gpu_pattern_error,
)
from scheduling.decisions.order import ScheduleError, parse_weight_schedule
from scheduling.decisions.processes import concurrency_error
from scheduling.decisions.sandboxes import egress_list_problem, warm_pool_problem
from scheduling.decisions.types import RoutingRuleView
from scheduling.decisions.warm import default_registry, warm_images_problem
from scheduling.spec import TASK_TYPES


def default_control_devices() -> list[str]:
    return list(DEFAULT_CONTROL_DEVICES)


def check_devices(gpu: str, control: object) -> None:
    errors = {}
    if why := gpu_pattern_error(gpu):
        errors["gpu_devices"] = why
    if control is not None and (why := control_devices_error(control)):
        errors["control_devices"] = why
    if errors:
        raise ValidationError(errors)


class Pool(models.Model):
    class Kind(TextChoices):
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
    # What a GPU job of this pool sees of its node's devices (docs/security.md).
    gpu_devices = models.CharField(
        max_length=255,
        blank=True,
        default=DEFAULT_GPU_DEVICE,
        help_text="Each GPU's device file on its node, {index} its index (on Slurm: its place "
        "in the node's gres.conf), {node} the node's name. Empty: the GPUs have no device "
        "files (virtual GPUs, counted only).",
    )
    control_devices = models.JSONField(
        default=default_control_devices,
        blank=True,
        help_text="Device files every GPU job gets besides its GPUs', e.g. "
        '["/dev/nvidiactl", "/dev/nvidia-uvm"]. A missing one fails the job.',
    )
    # Part of the image catalogue (docs/containers.md, "Catalogue").
    max_image_bytes = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="The largest image its tasks may run, in bytes: the sum of the layer sizes "
        "its manifest lists (compressed, as pulled). Empty: no limit.",
    )
    # Pulled onto its nodes ahead of use, and onto nodes lent to it before the lease starts
    # (docs/containers.md, "Pre-pulling").
    warm_images = models.JSONField(
        default=list,
        blank=True,
        help_text='Images pulled onto its nodes ahead of use, e.g. ["demo/python:3"]; a name '
        "without a registry is on the site's default registry.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def devices(self) -> DeviceFiles | None:
        return device_files(self.gpu_devices, self.control_devices or ())

    def clean(self) -> None:
        check_devices(self.gpu_devices, self.control_devices)
        registry = default_registry(
            settings.SWITCHYARD_IMAGE_REGISTRY, settings.SWITCHYARD_IMAGE_REGISTRIES
        )
        if why := warm_images_problem(self.warm_images, default_registry=registry):
            raise ValidationError({"warm_images": why})


class Node(models.Model):
    class State(TextChoices):
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
    gpu_devices = models.CharField(
        max_length=255, blank=True, help_text="Empty: the pool's (a pattern as the pool's)."
    )
    control_devices = models.JSONField(
        null=True, blank=True, default=None, help_text="Empty: the pool's."
    )

    class Meta:
        ordering = ["pool", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def devices(self) -> DeviceFiles | None:
        """Its own device files where it says, else its pool's."""
        pool = self.pool
        control = pool.control_devices if self.control_devices is None else self.control_devices
        return device_files(self.gpu_devices or pool.gpu_devices, control or ())

    def clean(self) -> None:
        check_devices(self.gpu_devices, self.control_devices)


class Queue(models.Model):
    class Policy(TextChoices):
        FAIRSHARE = "fairshare", "Fair-share"
        PRIORITY_QUOTA = "priority-quota", "Priority with quota"
        ELASTIC = "elastic", "Elastic"

    class Allocation(TextChoices):
        WHOLE_NODE = "whole-node", "Whole nodes"
        PACK = "pack", "Pack onto few nodes"

    name = models.SlugField(max_length=63, unique=True, validators=[validate_slug])
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
    # Live sandboxes (docs/sandboxes.md).
    over_concurrency = models.CharField(
        max_length=8,
        choices=[("queue", "queue"), ("refuse", "refuse")],
        default="queue",
        help_text="A live sandbox created while max_concurrency jobs run: it waits (queue) "
        "or is refused with the reason (refuse).",
    )
    idle_scale_in_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="A live sandbox without an exec for this many seconds ends (its default "
        "idle timeout, and the longest one may ask); a warm pool's template not used for "
        "this long scales to zero. Empty: 120 s.",
    )
    egress_allow = models.JSONField(
        default=list,
        blank=True,
        help_text="Hosts its live sandboxes may reach through their proxy, e.g. "
        '["pypi.example.org:443"]. Empty: no network.',
    )
    warm_pool = models.JSONField(
        default=dict,
        blank=True,
        help_text='Live sandboxes kept started ahead, by template: {"": 2} two of the '
        "host's system (docs/sandboxes.md).",
    )
    startup_timeout_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="A task dispatched but not started after this many seconds raises an alert "
        "(docs/capacity.md).",
    )
    startup_resubmit = models.BooleanField(
        default=True, help_text="… and is submitted again (not counted against its retries)."
    )
    weight_schedule = models.JSONField(
        default=list,
        blank=True,
        help_text='Time-of-day weights by task type, e.g. [{"from": "08:00", "to": "20:00", '
        '"weights": {"agent": 2}}] (docs/policy.md).',
    )
    wait_bound_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="A task ready for longer than this many seconds goes before every task of "
        "the pool that is not, and nothing passes it any more (docs/policy.md). Empty: no "
        "bound.",
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
        # A local pool's jobs share this machine's process ids (decisions/processes.py).
        local = bool(self.pool_id) and host.is_local(self.pool.backend)
        if local and (why := concurrency_error(self.max_concurrency, host.pid_max())):
            raise ValidationError({"max_concurrency": why})
        errors = {}
        if self.wait_bound_s is not None and self.wait_bound_s < 60:
            errors["wait_bound_s"] = (
                f"expected at least 60 (seconds), or empty for no bound; got {self.wait_bound_s}"
            )
        if bad := egress_list_problem(self.egress_allow):
            errors["egress_allow"] = f"expected {bad[0]}; got {bad[1]!r}"
        if bad := warm_pool_problem(self.warm_pool):
            errors["warm_pool"] = f"expected {bad[0]}; got {bad[1]!r}"
        elif why := warm_images_problem(
            [t for t in self.warm_pool if t],
            default_registry=default_registry(
                settings.SWITCHYARD_IMAGE_REGISTRY, settings.SWITCHYARD_IMAGE_REGISTRIES
            ),
        ):
            errors["warm_pool"] = f"templates: {why}"
        if errors:
            raise ValidationError(errors)


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

    @classmethod
    def from_rule(cls, rule: levels.LevelRule, queues: dict[str, Queue]) -> LevelRule:
        """The row for a rule as the decisions take it (the default site's, a promoted canary's)."""
        return cls(
            task_type=rule.task_type,
            queue=queues[rule.queue] if rule.queue else None,
            start_level=rule.start,
            step=rule.step,
            every_s=rule.every_s,
            limit_level=rule.limit,
            repeat=rule.repeat,
        )

    def as_rule(self) -> levels.LevelRule:
        return levels.LevelRule(
            task_type=self.task_type,
            queue=self.queue.name if self.queue is not None else None,
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

    @classmethod
    def from_view(cls, rule: RoutingRuleView, queues: dict[str, Queue]) -> RoutingRule:
        """The row for a rule as the decisions take it (the default site's, a promoted canary's)."""
        return cls(
            order=rule.order,
            match_type=rule.match_type or "",
            min_gpus=rule.min_gpus,
            min_cpus=rule.min_cpus,
            queue=queues[rule.queue],
        )


class Instance(models.Model):
    """This portal's name among others that may share a cluster: its jobs carry it (Slurm:
    in the job's comment), so reconciliation counts only its own jobs. One row, made on
    first use (docs/accounting.md)."""

    name = models.CharField(max_length=16, unique=True)

    def __str__(self) -> str:
        return self.name


class Canary(models.Model):
    """New routing and level rules tried on a share of submissions before they replace the
    current ones; their results are shown side by side (docs/console.md). One at a time."""

    class State(TextChoices):
        ACTIVE = "active", "Active"
        PROMOTED = "promoted", "Promoted"
        ABANDONED = "abandoned", "Abandoned"

    name = models.CharField(max_length=100)
    share_percent = models.PositiveSmallIntegerField(
        help_text="Of new submissions, the share that goes by these rules (1-100)."
    )
    routing_rules = models.JSONField(default=list)
    level_rules = models.JSONField(default=list)
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["state"], condition=models.Q(state="active"), name="one_active_canary"
            )
        ]

    def __str__(self) -> str:
        return f"canary #{self.pk} {self.name} ({self.share_percent} %, {self.state})"
