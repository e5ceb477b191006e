"""Brief per-process caches on the submission path: who a token is, and which projects a user
belongs to (docs/deployment.md, "Throughput").

A submission asked the database three times before it stored anything: the token (knox reads
the token and then all of its user's tokens), and the user's membership of the project.
Each web process now keeps those answers for `SWITCHYARD_AUTH_CACHE_SECONDS` (10 s). A change
made in this process (a token revoked, a password changed, a member removed) empties its
caches at once, through Django's signals; other processes forget within those seconds. A
value of 0 turns the caches off.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from knox.models import AuthToken
from rest_framework import exceptions

from portal.models import Membership, Project
from portal.selectors import project_get_for_user
from portal.twofactor import token_refusal

MAX_ENTRIES = 10_000


class Brief:
    """A dict whose entries last `SWITCHYARD_AUTH_CACHE_SECONDS`; safe across threads."""

    def __init__(self) -> None:
        self._data: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any | None:
        hit = self._data.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: Any, value: Any) -> None:
        seconds = settings.SWITCHYARD_AUTH_CACHE_SECONDS
        if seconds <= 0:
            return
        with self._lock:
            if len(self._data) >= MAX_ENTRIES:
                self._data.clear()
            self._data[key] = (time.monotonic() + seconds, value)

    def clear(self, *args: Any, **kwargs: Any) -> None:  # also a signal receiver
        with self._lock:
            self._data.clear()


TOKENS = Brief()  # token digest → (user, token row)
MEMBERS = Brief()  # (user id, project slug) → project


class CachedTokenAuthentication(TokenAuthentication):
    """knox's token authentication, its answer kept briefly per token (see the module)."""

    def authenticate_credentials(self, token: bytes):
        try:
            digest = hash_token(token.decode("utf-8"))
        except (TypeError, ValueError, UnicodeDecodeError):
            return super().authenticate_credentials(token)
        hit = TOKENS.get(digest)
        if hit is not None:
            user, row = hit
            if row.expiry is None or row.expiry > timezone.now():
                # A copy: a request may set attributes on its user (role caches).
                return copy.copy(user), row
        user, row = super().authenticate_credentials(token)
        refused = token_refusal(user)  # a role that requires two-factor, given since
        if refused:
            raise exceptions.PermissionDenied(refused)
        TOKENS.put(digest, (copy.copy(user), row))
        return user, row


class CachedTokenScheme(KnoxTokenScheme):
    """The API schema names it as knox's own token scheme (`Authorization: Token …`)."""

    # drf-spectacular's extensions take a class or its dotted path; knox's subclass set a
    # path, so mypy infers str for the attribute.
    target_class = CachedTokenAuthentication  # type: ignore[assignment]


def member_project(user, slug: str):
    """The project `slug` if `user` is a member (else None), kept briefly."""
    key = (user.pk, slug)
    project = MEMBERS.get(key)
    if project is None:
        project = project_get_for_user(user, slug)
        if project is not None:
            MEMBERS.put(key, project)
    return project


def connect() -> None:
    for model in (AuthToken, get_user_model()):
        post_save.connect(TOKENS.clear, sender=model, dispatch_uid=f"sy-hot-tokens-{model}")
        post_delete.connect(TOKENS.clear, sender=model, dispatch_uid=f"sy-hot-tokens-d-{model}")
    for model in (Membership, Project, get_user_model()):
        post_save.connect(MEMBERS.clear, sender=model, dispatch_uid=f"sy-hot-members-{model}")
        post_delete.connect(MEMBERS.clear, sender=model, dispatch_uid=f"sy-hot-members-d-{model}")
