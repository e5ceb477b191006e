"""Live sandboxes (docs/sandboxes.md): the face of a session task, and its exec history.

A sandbox is a Task of type `sandbox` whose spec has `session_idle_s` set; the row here is
what its users see of it: a public id nobody can guess, its state, its limits and times,
and one `SandboxExec` per command run in it.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models import TextChoices


def new_sandbox_id() -> str:
    """`sbx-` and 24 hex digits (96 random bits): the id in URLs, not guessable."""
    return "sbx-" + secrets.token_hex(12)


class SandboxState(TextChoices):
    STARTING = "starting", "Starting"
    READY = "ready", "Ready"
    QUEUED = "queued", "Queued"
    ENDED = "ended", "Ended"
    FAILED = "failed", "Failed"


LIVE_SANDBOX_STATES = frozenset({SandboxState.STARTING, SandboxState.READY, SandboxState.QUEUED})


class Sandbox(models.Model):
    public_id = models.CharField(max_length=32, unique=True, default=new_sandbox_id)
    task = models.OneToOneField("scheduling.Task", on_delete=models.CASCADE, related_name="sandbox")
    project = models.ForeignKey(
        "portal.Project", on_delete=models.PROTECT, related_name="sandboxes"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="sandboxes"
    )
    template = models.CharField(
        max_length=255, blank=True, help_text='"" the host\'s system; else an image reference.'
    )
    cpus = models.PositiveIntegerField(default=1)
    memory_mb = models.PositiveIntegerField(default=1024)
    idle_timeout_s = models.PositiveIntegerField()
    max_lifetime_s = models.PositiveIntegerField()
    egress = models.JSONField(default=list, blank=True, help_text='"host:port" it may reach.')
    state = models.CharField(
        max_length=16, choices=SandboxState.choices, default=SandboxState.STARTING
    )
    created_at = models.DateTimeField()
    ready_at = models.DateTimeField(null=True, blank=True)
    # Its creation, or last file transfer; an exec's own row says when it ended, so an
    # exec costs one insert and one update of its own row. Both are written in full when
    # the sandbox ends (engine/sandboxes.py: `activity` reads them live).
    last_active_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.TextField(blank=True)
    exec_count = models.PositiveIntegerField(default=0)
    created_by_task = models.ForeignKey(
        "scheduling.Task",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="sandboxes_created",
        help_text="The batch task whose scoped token created it (docs/sandboxes.md).",
    )

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The timers pass: live sandboxes, oldest activity first (idle reclaim).
            models.Index(
                fields=["last_active_at"],
                condition=models.Q(state__in=["starting", "ready", "queued"]),
                name="sandbox_live_idle",
            ),
            models.Index(fields=["project", "-id"], name="sandbox_project_recent"),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def live(self) -> bool:
        return self.state in LIVE_SANDBOX_STATES


class SandboxExec(models.Model):
    """One command run in a sandbox: stored when it starts, completed when it ends."""

    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="execs")
    argv = models.JSONField()
    started_at = models.DateTimeField()
    # While it runs (no end yet) the sandbox is not idle, up to this time (its timeout).
    deadline = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    stdout_bytes = models.PositiveBigIntegerField(default=0)
    stderr_bytes = models.PositiveBigIntegerField(default=0)
    timed_out = models.BooleanField(default=False)
    error = models.CharField(max_length=255, blank=True, help_text="Why it did not run.")
    preview = models.CharField(
        max_length=512, blank=True, help_text="The start of its output, as text."
    )

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["sandbox", "-id"], name="sandbox_exec_recent"),
            # A sandbox's last activity and its execs in flight, read by the idle reclaim
            # every few seconds for every live sandbox: one index step each, however many
            # execs it ran.
            models.Index(fields=["sandbox", "-ended_at"], name="sandbox_exec_last_end"),
            models.Index(
                fields=["sandbox"],
                condition=models.Q(ended_at__isnull=True),
                name="sandbox_exec_in_flight",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sandbox_id}: {' '.join(map(str, self.argv))[:60]}"
