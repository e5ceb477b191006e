"""The site's storage areas: where jobs find their projects' and users' files, which pools
mount them, and how (docs/storage.md). Configuration: versioned like pools and queues."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import TextChoices

from portal.models import validate_slug
from scheduling.decisions.storage import (
    AreaView,
    overlap_problem,
    pattern_problem,
    retention_problem,
)
from scheduling.models.site import Pool


class StorageArea(models.Model):
    class Owner(TextChoices):
        PROJECT = "project", "The project: a folder per project, its members' group"
        USER = "user", "The user: a folder per user, their job account's"
        SITE = "site", "The site: one folder, filled by its admins"

    name = models.SlugField(
        max_length=63,
        unique=True,
        validators=[validate_slug],
        help_text="Its name in the Files API and pages: /api/v1/files/<name>/…",
    )
    path = models.CharField(
        max_length=1024,
        help_text="The host path, the same inside every job: /scratch/{project}, "
        "/home/{user} or /datasets.",
    )
    owner = models.CharField(
        max_length=16,
        choices=Owner.choices,
        help_text="Who owns the folders the portal makes in it.",
    )
    read_only = models.BooleanField(
        default=False,
        help_text="Jobs mount it read-only (the Files page still writes a "
        "project's or user's folder).",
    )
    pools = models.ManyToManyField(
        Pool,
        related_name="storage_areas",
        blank=True,
        help_text="The pools whose jobs mount it (their own folder of it).",
    )
    quota_bytes = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="A soft quota per folder, in bytes: a warning, not a limit.",
    )
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Tasks' own working folders (<project folder>/tasks/<task id>) are removed "
        "this many days after their task ended; empty: kept forever. Project areas only.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        problem = pattern_problem(self.path, self.owner)
        if problem is not None:
            raise ValidationError({"path": f"{problem}; got {self.path}"})
        others = StorageArea.objects.exclude(pk=self.pk).values_list("name", "path", "owner")
        problem = overlap_problem(self.path, self.owner, others)
        if problem is not None:
            raise ValidationError({"path": f"{problem}; got {self.path}"})
        problem = retention_problem(self.owner, self.retention_days)
        if problem is not None:
            raise ValidationError({"retention_days": problem})

    def as_view(self, pools: tuple[str, ...]) -> AreaView:
        return AreaView(
            name=self.name,
            path=self.path,
            owner=self.owner,
            read_only=self.read_only,
            pools=pools,
            quota_bytes=self.quota_bytes,
            retention_days=self.retention_days,
        )
