"""Alerts: what an operator should know, recorded and mailed to the platform admins."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from portal.notify import notify
from scheduling.models import Alert


def raise_alert(kind: str, subject: str, message: str, *, node=None, task=None) -> Alert:
    alert = Alert.objects.create(kind=kind, subject=subject, message=message, node=node, task=task)
    for admin in get_user_model().objects.filter(is_superuser=True, is_active=True):
        notify(admin, subject, message)
    return alert
