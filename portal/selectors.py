"""Reads with permission checks for projects."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from portal.models import Project


def project_list_for_user(user: AbstractBaseUser) -> QuerySet[Project]:
    return Project.objects.filter(memberships__user=user).distinct()


def project_get_for_user(user: AbstractBaseUser, slug: str) -> Project | None:
    return Project.objects.filter(slug=slug, memberships__user=user).first()
