from __future__ import annotations

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import TextChoices
from django.utils.text import capfirst

from scheduling.decisions.sandboxes import egress_list_problem
from scheduling.decisions.storage import project_slug_problem
from scheduling.descriptor.limits import slug_problem


def validate_slug(value: object) -> None:
    """A project's slug or a queue's name as every descriptor must write it: what the admin
    console stores, a descriptor can name."""
    problem = slug_problem(value)
    if problem is not None:
        raise ValidationError(problem, code="invalid")


class Project(models.Model):
    slug = models.SlugField(max_length=63, unique=True, validators=[validate_slug])
    name = models.CharField(max_length=200)
    pi = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="led_projects"
    )
    share = models.PositiveIntegerField(
        default=1,
        help_text="Fair-share shares: in fair-share queues, projects that used less of their "
        "share recently go first (docs/policy.md).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    sandbox_egress = models.JSONField(
        default=list,
        blank=True,
        help_text="Hosts its live sandboxes may reach besides their queue's, e.g. "
        '["api.example.org:443"] (docs/sandboxes.md).',
    )

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        problem = project_slug_problem(self.slug or "")
        if problem is not None:
            raise ValidationError({"slug": f"{problem}; got {self.slug}"})
        if bad := egress_list_problem(self.sandbox_egress):
            raise ValidationError({"sandbox_egress": f"expected {bad[0]}; got {bad[1]!r}"})


class Membership(models.Model):
    class Role(TextChoices):
        PI = "pi", "Principal investigator"
        MEMBER = "member", "Member"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="one_membership_per_project")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"


class ClusterAccount(models.Model):
    """The researcher's own Unix account on the clusters; jobs run as it when set.

    Without one, jobs run as the backend's configured service account.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cluster_account"
    )
    unix_username = models.CharField(
        max_length=32,
        validators=[RegexValidator(r"^[a-z_][a-z0-9_-]{0,31}$", "a POSIX user name")],
    )

    def __str__(self) -> str:
        return f"{self.user} → {self.unix_username}"


class ConfigVersion(models.Model):
    """One change to the site's configuration: what an object was after it, who made it,
    when and why. Rolling back writes a new version (docs/console.md)."""

    class Action(TextChoices):
        CREATE = "create", "Created"
        UPDATE = "update", "Changed"
        DELETE = "delete", "Deleted"
        ROLLBACK = "rollback", "Rolled back"

    at = models.DateTimeField(auto_now_add=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Empty: the portal itself (a seed, a schedule).",
    )
    author_name = models.CharField(max_length=150, blank=True)
    model = models.CharField(max_length=100, help_text="app_label.model")
    object_id = models.PositiveBigIntegerField()
    object_repr = models.CharField(max_length=200)
    action = models.CharField(max_length=8, choices=Action.choices)
    before = models.JSONField(null=True, blank=True, help_text="Empty: it did not exist.")
    after = models.JSONField(null=True, blank=True, help_text="Empty: it was deleted.")
    reason = models.TextField(blank=True)
    restores = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="For a rollback: the version it went back to.",
    )

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["model", "object_id"], name="config_version_object")]

    def __str__(self) -> str:
        return f"v{self.pk} {self.action} {self.model} {self.object_repr}"

    @property
    def model_name(self) -> str:
        """The versioned model as the console names it ("Classifier settings")."""
        return model_display_name(self.model)


def model_display_name(label: str) -> str:
    """A model's name as the console shows it (`scheduling.classifiersettings` → "Classifier
    settings"); the label itself for a model that is gone."""
    try:
        return str(capfirst(apps.get_model(label)._meta.verbose_name))
    except (LookupError, ValueError):
        return label


class AppendOnly(models.QuerySet):
    def update(self, **kwargs):
        raise ValueError("the audit log is append-only")

    def delete(self):
        raise ValueError("the audit log is append-only")


class AuditEvent(models.Model):
    """Who did what, when, from where: written once, never changed or deleted.

    Plain text and numbers, no foreign keys: a row outlives the user, task or queue it names
    (a deleted user must not rewrite history). PostgreSQL refuses UPDATE and DELETE on the
    table itself (a trigger); the model refuses them everywhere.
    """

    class Action(TextChoices):
        TASK_SUBMIT = "task.submit", "Task submitted"
        TASK_CANCEL = "task.cancel", "Task cancelled"
        WORKFLOW_SUBMIT = "workflow.submit", "Workflow submitted"
        WORKFLOW_CANCEL = "workflow.cancel", "Workflow cancelled"
        PRIORITY_REQUEST = "priority.request", "Priority raise asked"
        PRIORITY_APPROVE = "priority.approve", "Priority raise approved"
        PRIORITY_REJECT = "priority.reject", "Priority raise rejected"
        QUOTA_SET = "quota.set", "Quota set"
        QUOTA_DELETE = "quota.delete", "Quota removed"
        MEMBER_ADD = "member.add", "Member added"
        MEMBER_REMOVE = "member.remove", "Member removed"
        NODE_DRAIN = "node.drained", "Node drained"
        NODE_DOWN = "node.down", "Node marked down"
        NODE_RESUME = "node.up", "Node resumed"
        LEASE_OPEN = "lease.open", "Lease opened"
        LEASE_END = "lease.end", "Lease ended"
        CONFIG_CHANGE = "config.change", "Configuration changed"
        CONFIG_ROLLBACK = "config.rollback", "Configuration rolled back"
        CANARY_START = "canary.start", "Canary started"
        CANARY_PROMOTE = "canary.promote", "Canary promoted"
        CANARY_ABANDON = "canary.abandon", "Canary abandoned"
        LOGIN_FAILED = "login.failed", "Login failed"
        ALLOCATION_REQUEST = "allocation.request", "More allocation asked"
        ALLOCATION_APPROVE = "allocation.approve", "More allocation approved"
        ALLOCATION_REJECT = "allocation.reject", "More allocation rejected"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor_id = models.BigIntegerField(null=True, blank=True, help_text="Empty: the portal.")
    actor = models.CharField(max_length=150, blank=True, db_index=True)
    action = models.CharField(max_length=32, choices=Action.choices, db_index=True)
    target = models.CharField(max_length=200, help_text="What it acted on: `task #12`.")
    project = models.CharField(max_length=63, blank=True, db_index=True)
    queue = models.CharField(max_length=63, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    address = models.GenericIPAddressField(null=True, blank=True)

    objects = AppendOnly.as_manager()

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor or 'portal'} {self.action} {self.target}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("the audit log is append-only")


class UserSettings(models.Model):
    """A user's own choices: for now, whether their tasks' ends are mailed to them."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="switchyard_settings"
    )
    email_on_task_end = models.BooleanField(
        default=False,
        help_text="Mail me when a task of mine ends (a descriptor's `notify` overrides it).",
    )

    class Meta:
        verbose_name_plural = "user settings"

    def __str__(self) -> str:
        return f"{self.user} settings"
