"""Writes on the organisation: who is a member of a project; rolling configuration back
and undoing a change.

The project's lead (or a platform admin) adds and removes members, on the project page and
through the API; every change is in the audit log.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from portal import audit, history, roles
from portal.errors import ApplicationError
from portal.models import ConfigVersion, Membership, Project
from scheduling import usage


@transaction.atomic
def member_add(*, by: User, project: Project, username: str) -> Membership:
    """The project's lead (or a platform admin) adds an existing account as a member, by its
    exact username.

    Only a researcher's account may be added: not a platform admin (who sees everything and
    submits as nobody's member) nor finance (who reads usage and changes nothing), nor an
    inactive account. Every account that may not be added gets the very answer a name with
    no account gets, so the form tells a lead nothing about who exists beyond what they may add.
    """
    if not roles.leads_project(by, project):
        raise ApplicationError(
            "only the project's lead or a platform admin adds members", status=403
        )
    member = (
        User.objects.filter(username=username, is_active=True, is_superuser=False)
        .exclude(groups__name=roles.FINANCE_GROUP)
        .first()
    )
    if member is None:
        raise ApplicationError(
            "no researcher's account has this exact username", field="username", got=username[:150]
        )
    membership, created = Membership.objects.get_or_create(user=member, project=project)
    if not created:
        raise ApplicationError("already a member", field="username", got=username, status=409)
    audit.record(audit.Action.MEMBER_ADD, actor=by, target=f"user {username}", project=project.slug)
    usage.member_joined(project=project, user=member)
    return membership


@transaction.atomic
def member_remove(*, by: User, project: Project, username: str) -> None:
    """Remove a member (and their own quotas); the project's lead stays. Their job account
    leaves the project's Unix group (a worker does it): it reaches the project's folders no
    more, and their tasks not yet started are refused the project's folders."""
    if not roles.leads_project(by, project):
        raise ApplicationError(
            "only the project's lead or a platform admin removes members", status=403
        )
    membership = Membership.objects.filter(project=project, user__username=username).first()
    if membership is None:
        raise ApplicationError("no such member", field="username", got=username[:150], status=404)
    if membership.role == Membership.Role.PI:
        raise ApplicationError("the project's lead cannot be removed", field="username", status=409)
    usage.member_quotas_delete(project=project, user=membership.user)
    membership.delete()
    usage.member_left(project=project, user=membership.user)
    audit.record(
        audit.Action.MEMBER_REMOVE,
        actor=by,
        target=f"user {username}",
        project=project.slug,
        detail={"user_id": membership.user_id},  # the storage pass's record of who left
    )


@transaction.atomic
def lead_joins(*, project: Project) -> Membership:
    """The project's lead is its member with the lead's role (a project made in the admin
    console, whose members are otherwise changed only on its members page); their folders
    and group are made now."""
    membership, created = Membership.objects.get_or_create(
        user=project.pi, project=project, defaults={"role": Membership.Role.PI}
    )
    if created:
        usage.member_joined(project=project, user=project.pi)
    return membership


def config_version_restore(*, user: User, version: ConfigVersion, reason: str) -> ConfigVersion:
    """A platform admin makes the object what it was right after `version`, saying why; the
    rollback is itself recorded as a new version, which is returned (portal/history.py)."""
    return history.rollback(user=user, version=version, reason=reason)


def config_version_undo(*, user: User, version: ConfigVersion, reason: str) -> ConfigVersion:
    """A platform admin undoes one change, saying why: the object goes back to its version
    before it (or is deleted, if the change made it); the undo is itself a new version, which
    is returned (portal/history.py)."""
    return history.undo(user=user, version=version, reason=reason)
