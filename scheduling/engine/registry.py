"""Backends by alias, like Django's CACHES: `settings.COMPUTE_BACKENDS[alias]`.

The engine is the portal's only door to backends: it builds them here, and hands a backend
that runs over the portal's own node inventory (the local backend) a function that reads it,
so no backend ever imports the ORM.
"""

from __future__ import annotations

import functools
import logging

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from scheduling.backends import Backend
from scheduling.engine.backend_metrics import instrument
from scheduling.selectors import borrowing_for_backend, node_views_for_backend

log = logging.getLogger(__name__)


def get_backend(alias: str) -> Backend:
    return _build(alias, _config_key(alias))


def configured_aliases() -> list[str]:
    return sorted(settings.COMPUTE_BACKENDS)


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
    options = dict(config.get("OPTIONS", {}))
    if getattr(cls, "uses_inventory", False):
        options.setdefault("node_source", node_views_for_backend)
    if getattr(cls, "backfills_across_pools", False):
        options.setdefault("borrowing_source", borrowing_for_backend)
    backend = cls(alias=alias, **options)
    said = config.get("RUNS_ON_THIS_HOST", False)
    if said is not backend.runs_on_this_host:
        raise ImproperlyConfigured(
            f"COMPUTE_BACKENDS[{alias!r}]['RUNS_ON_THIS_HOST']: expected"
            f" {backend.runs_on_this_host} for {config['BACKEND']}, got {said!r}"
        )
    return instrument(backend)


def close_backends() -> None:
    """Close every configured backend (the local backend stops its launcher), as when
    `manage.py up` stops, like Django's `close_caches`; the jobs themselves go on. A backend's
    warm sandboxes on this machine go first: unclaimed, they would wait hours for a portal
    that is gone (the next start warms new ones)."""
    for alias in configured_aliases():
        backend = get_backend(alias)
        try:
            if backend.runs_on_this_host:
                backend.keep_warm([])
        except Exception as exc:  # noqa: BLE001 - stopping: say it, and close the rest
            log.warning("%s: its warm sandboxes were not stopped: %s", alias, exc)
        finally:
            backend.close()
