"""Logging in as the centre's users: its LDAP directory (django-auth-ldap), and what a user's
groups give them here, written at every login from either source (docs/security.md, "LDAP").

The map from groups to projects and roles is SWITCHYARD_GROUP_MAP (config/group_map.py). A login
sets exactly what the map can give: the projects, queues and roles it names are added or taken
away to match the user's groups now; what it never names is left as the portal's own pages set
it. A project's lead (its `pi`) keeps their membership whatever the groups say.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import transaction
from django_auth_ldap.backend import LDAPBackend

from config.group_map import Access, access_for, managed_by
from portal import audit, roles
from portal.models import Membership, Project
from scheduling import usage
from scheduling.models import Queue

log = logging.getLogger(__name__)


class ActiveAccountsOnly:
    """An account switched off (`is_active` false) neither logs in nor keeps the sessions it
    had, as with Django's own backend: django-auth-ldap's and mozilla-django-oidc's backends
    check neither, so a directory or single sign-on user switched off in the admin console kept
    every page of a session begun before (the API refused it: DRF checks)."""

    def authenticate(self, request, **credentials):
        user = super().authenticate(request, **credentials)
        return user if user is not None and user.is_active else None

    def get_user(self, user_id):
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None


class DirectoryBackend(ActiveAccountsOnly, LDAPBackend):
    """django-auth-ldap's backend (the password checked by a bind as the user's entry), and
    after a good password the user's groups applied."""

    def authenticate_ldap_user(self, ldap_user, password):
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is not None and user.is_active:  # a switched-off account's login changes nothing
            groups_apply(user=user, groups=ldap_user.group_dns, source="ldap")
        return user


@transaction.atomic
def groups_apply(*, user: User, groups: Iterable[str], source: str) -> Access:
    """Make `user`'s roles, queues and projects what the map gives their `groups` (LDAP's
    group DNs, or an OpenID Connect claim's group names); returns what they were given."""
    group_map = settings.SWITCHYARD_GROUP_MAP
    wanted, managed = access_for(groups, group_map), managed_by(group_map)
    _apply_roles(user, wanted, managed)
    _apply_queues(user, wanted, managed)
    _apply_projects(user, wanted, managed, source)
    return wanted


def _apply_roles(user: User, wanted: Access, managed: Access) -> None:
    if managed.platform_admin and user.is_superuser != wanted.platform_admin:
        user.is_superuser = user.is_staff = wanted.platform_admin
        user.save(update_fields=["is_superuser", "is_staff"])
    if managed.finance:
        finance, _ = Group.objects.get_or_create(name=roles.FINANCE_GROUP)
        if wanted.finance:
            user.groups.add(finance)
        else:
            user.groups.remove(finance)


def _apply_queues(user: User, wanted: Access, managed: Access) -> None:
    queues = {queue.name: queue for queue in Queue.objects.filter(name__in=managed.queues)}
    for name in sorted(managed.queues - queues.keys()):
        log.warning("SWITCHYARD_GROUP_MAP names queue %r, which does not exist", name)
    for name, queue in queues.items():
        if name in wanted.queues:
            queue.admins.add(user)
        else:
            queue.admins.remove(user)


def _apply_projects(user: User, wanted: Access, managed: Access, source: str) -> None:
    projects = {p.slug: p for p in Project.objects.filter(slug__in=list(managed.projects))}
    for slug in sorted(managed.projects.keys() - projects.keys()):
        log.warning("SWITCHYARD_GROUP_MAP names project %r, which does not exist", slug)
    current = {
        m.project.slug: m
        for m in Membership.objects.select_related("project").filter(
            user=user, project__in=projects.values()
        )
    }
    detail = {"source": source, "user_id": user.pk}
    for slug, project in projects.items():
        role, membership = wanted.projects.get(slug), current.get(slug)
        if project.pi_id == user.pk:
            continue  # the lead stays the lead: the project is theirs
        if role is None and membership is not None:
            usage.member_quotas_delete(project=project, user=user)
            membership.delete()
            usage.member_left(project=project, user=user)
            audit.record(
                audit.Action.MEMBER_REMOVE,
                actor=None,
                target=f"user {user.get_username()}",
                project=slug,
                detail=detail,
            )
        elif role is not None and membership is None:
            Membership.objects.create(user=user, project=project, role=role)
            usage.member_joined(project=project, user=user)
            audit.record(
                audit.Action.MEMBER_ADD,
                actor=None,
                target=f"user {user.get_username()}",
                project=slug,
                detail={**detail, "role": role},
            )
        elif role is not None and membership is not None and membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
