"""What-if runs of the simulator started on the console (docs/simulation.md): what was asked,
how far it got, and what it found. Kept, so that runs can be compared later.

The table keeps the name it had when runs were scheduling's (scheduling_simulationrun)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import TextChoices


class SimulationRun(models.Model):
    class Workload(TextChoices):
        DAY = "validation-day", "validation day: the criteria"
        BURST = "launch-mix", "launch mix alone, on the idle site"
        HISTORY = "history", "the portal's own history"
        SWF = "swf", "an SWF trace (upload)"

    class State(TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    # The only moves a run makes; simulation/services.py makes each as a compare-and-set.
    MOVES: dict[str, set[str]] = {
        State.QUEUED: {State.RUNNING, State.FAILED},
        State.RUNNING: {State.SUCCEEDED, State.FAILED},
    }

    workload = models.CharField(max_length=16, choices=Workload.choices)
    parameters = models.JSONField(
        default=dict, help_text="What the run was asked: seed, policies, days, limit, repeat."
    )
    upload = models.CharField(
        max_length=255,
        blank=True,
        help_text="swf: the trace, as a path under SWITCHYARD_SIMULATION_DIR.",
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, help_text="Percent done.")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "scheduling_simulationrun"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"simulation #{self.pk} ({self.workload})"

    @property
    def live(self) -> bool:
        return self.state in (self.State.QUEUED, self.State.RUNNING)

    @property
    def upload_path(self) -> Path | None:
        """Where the uploaded trace is, read from the settings now (not when it was stored)."""
        return Path(settings.SWITCHYARD_SIMULATION_DIR) / self.upload if self.upload else None

    @property
    def upload_name(self) -> str:
        return Path(self.upload).name if self.upload else ""

    @property
    def asked(self) -> str:
        """The parameters in a line: "seed 1 · fifo, easy, switchyard"."""
        p = self.parameters
        parts = []
        if "seed" in p:
            parts.append(f"seed {p['seed']}")
        if "days" in p:
            parts.append(f"last {p['days']:g} days")
        if self.workload == self.Workload.HISTORY:
            parts.append(f"queues {', '.join(p['queues'])}" if p.get("queues") else "whole site")
        if self.upload:
            parts.append(self.upload_name)
        if p.get("limit"):
            parts.append(f"first {p['limit']:,} jobs")
        if p.get("repeat", 1) > 1:
            parts.append(f"replayed {p['repeat']} times")
        parts.append(", ".join(p.get("policies", [])))
        return " · ".join(parts)

    @property
    def seconds(self) -> float | None:
        """How long a worker took (so far, for a running run: None)."""
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None
