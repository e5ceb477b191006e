from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models


class Project(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    pi = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="led_projects"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    class Role(models.TextChoices):
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
