"""The site's image catalogue: the registries a task's image may come from and the images on
them, by workload family, pool and task type, with defaults and deprecations
(docs/containers.md, "Catalogue"). Configuration: versioned like pools and storage areas."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import TextChoices

from scheduling.decisions.catalogue import (
    ImageEntry,
    RegistryEntry,
    entry_problem,
    host_problem,
    repository_problem,
    tags_problem,
    types_problem,
)
from scheduling.models.site import Pool
from scheduling.spec import TASK_TYPES


class ImageRegistry(models.Model):
    host = models.CharField(
        max_length=255,
        unique=True,
        help_text="host[:port], as image references name it: registry.example.org, "
        "127.0.0.1:15000. The portal must also be able to reach it "
        "(SWITCHYARD_IMAGE_REGISTRIES).",
    )
    any_image = models.BooleanField(
        default=False,
        help_text="Tasks may run any image of this registry, listed or not (a listed image's "
        "pools, types and deprecation still apply to it).",
    )
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["host"]
        verbose_name_plural = "image registries"

    def __str__(self) -> str:
        return self.host

    def clean(self) -> None:
        problem = host_problem(self.host)
        if problem is not None:
            raise ValidationError({"host": f"{problem}; got {self.host}"})

    def as_entry(self) -> RegistryEntry:
        return RegistryEntry(host=self.host, any_image=self.any_image)


class CatalogueImage(models.Model):
    class Family(TextChoices):
        HPC_TOOLCHAIN = "hpc-toolchain", "HPC toolchain"
        AI_TRAINING = "ai-training", "AI training"
        AI_INFERENCE = "ai-inference", "AI inference"
        AGENT_RUNTIME = "agent-runtime", "Agent runtime"
        SANDBOX_BASE = "sandbox-base", "Sandbox base"

    class State(TextChoices):
        ACTIVE = "active", "In service"
        DEPRECATED = (
            "deprecated",
            "Deprecated: accepted with a warning (refused from its retire date)",
        )
        RETIRED = "retired", "Retired: refused"

    registry = models.ForeignKey(ImageRegistry, on_delete=models.PROTECT, related_name="images")
    repository = models.CharField(
        max_length=255, help_text="The path on the registry, without tag: hpc/gromacs."
    )
    tags = models.JSONField(
        default=list,
        blank=True,
        help_text='The tags allowed, e.g. ["2024.1", "2024.2"]; empty: any tag.',
    )
    family = models.CharField(max_length=32, choices=Family.choices)
    pools = models.ManyToManyField(
        Pool,
        related_name="catalogue_images",
        blank=True,
        help_text="The pools whose tasks may run it; none: every pool.",
    )
    task_types = models.JSONField(
        default=list, blank=True, help_text="The task types that may run it; empty: every type."
    )
    default_for = models.JSONField(
        default=list,
        blank=True,
        help_text="The task types that run it when their descriptor names no image (on the "
        "pools it is for, where the pool runs images). One tag only.",
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    retire_on = models.DateField(
        null=True,
        blank=True,
        help_text="A deprecated image is refused from this day on (site time).",
    )
    note = models.CharField(
        max_length=200, blank=True, help_text="Shown with a deprecation: what to use instead."
    )

    class Meta:
        ordering = ["registry__host", "repository", "id"]

    def __str__(self) -> str:
        tags = "|".join(self.tags or []) or "*"
        return f"{self.registry_id and self.registry.host}/{self.repository}:{tags}"

    def clean(self) -> None:
        problems = {}
        if self.registry_id is not None:
            problem = repository_problem(self.registry.host, self.repository)
            if problem is not None:
                problems["repository"] = f"{problem}; got {self.repository}"
        for name, problem in (
            ("tags", tags_problem(self.tags)),
            ("task_types", types_problem(self.task_types, TASK_TYPES)),
            ("default_for", types_problem(self.default_for, TASK_TYPES)),
        ):
            if problem is not None:
                problems[name] = problem
        if problems:
            raise ValidationError(problems)
        if self.registry_id is None:
            return
        others = CatalogueImage.objects.exclude(pk=self.pk).select_related("registry")
        found = entry_problem(self.as_entry(()), [o.as_entry(()) for o in others])
        if found is not None:
            raise ValidationError({found[0]: found[1]})

    def as_entry(self, pools: tuple[str, ...]) -> ImageEntry:
        return ImageEntry(
            registry=self.registry.host,
            repository=self.repository,
            family=self.family,
            tags=tuple(self.tags or ()),
            pools=pools,
            task_types=tuple(self.task_types or ()),
            default_for=tuple(self.default_for or ()),
            state=self.state,
            retire_on=self.retire_on,
            note=self.note,
        )
