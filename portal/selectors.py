"""Reads with permission checks for projects."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from portal.errors import ApplicationError
from portal.models import Project


def project_list_for_user(user: AbstractBaseUser) -> QuerySet[Project]:
    return Project.objects.filter(memberships__user=user).distinct()


def project_get_for_user(user: AbstractBaseUser, slug: str) -> Project | None:
    return Project.objects.filter(slug=slug, memberships__user=user).first()


def project_get_for_member(user: AbstractBaseUser, slug: str, *, field: str = "project") -> Project:
    """A project the user is a member of, or a 400 naming the field (never says whether the
    project exists: outsiders learn nothing)."""
    project = project_get_for_user(user, slug)
    if project is None:
        raise ApplicationError("you are not a member of this project", field=field, got=slug)
    return project
