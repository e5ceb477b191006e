"""Mail to users about what happened to their requests (console in development, SMTP when
EMAIL_HOST is set). A failure to send is logged, never a failure of the change it reports."""

from __future__ import annotations

import logging

from django.core.mail import send_mail

log = logging.getLogger(__name__)


def notify(user, subject: str, body: str) -> bool:
    """Mail `user` if they have an address; False when nothing was sent."""
    if not getattr(user, "email", ""):
        return False
    try:
        send_mail(f"[Switchyard] {subject}", body, None, [user.email])
    except Exception:  # noqa: BLE001 - any mail failure: the decision itself stands
        log.warning("could not mail %s about %r", user.email, subject, exc_info=True)
        return False
    return True
