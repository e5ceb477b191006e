"""Backends by alias, like Django's CACHES: `settings.COMPUTE_BACKENDS[alias]`."""

from __future__ import annotations

import functools

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from scheduling.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    Job,
    JobState,
    SubmitRequest,
)

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "Job",
    "JobState",
    "SubmitRequest",
    "get_backend",
]


def get_backend(alias: str) -> Backend:
    return _build(alias, _config_key(alias))


def _config_key(alias: str) -> str:
    # Part of the cache key, so override_settings in tests builds a fresh backend.
    return repr(sorted(settings.COMPUTE_BACKENDS.get(alias, {}).items()))


@functools.lru_cache(maxsize=32)
def _build(alias: str, _key: str) -> Backend:
    try:
        config = settings.COMPUTE_BACKENDS[alias]
    except KeyError:
        known = ", ".join(sorted(settings.COMPUTE_BACKENDS)) or "none"
        raise ImproperlyConfigured(
            f"compute backend {alias!r} is not configured (configured: {known})"
        ) from None
    cls = import_string(config["BACKEND"])
    return cls(alias=alias, **config.get("OPTIONS", {}))
