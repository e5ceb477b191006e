"""Trigger files ("data ready" flags) that release a waiting task (docs/workflows.md).

A trigger must lie under one of the configured roots (`SWITCHYARD_TRIGGER_ROOTS`): a user
must not be able to probe the portal's filesystem with it. The path is resolved again at
every check, so a symlink planted later cannot lead outside the roots.
"""

from __future__ import annotations

import os

from django.conf import settings


def trigger_roots() -> list[str]:
    return [os.path.realpath(root) for root in settings.SWITCHYARD_TRIGGER_ROOTS]


def trigger_path_allowed(path: str, roots: list[str] | None = None) -> bool:
    """Only paths under a configured root."""
    return _under(os.path.realpath(path), trigger_roots() if roots is None else roots)


def _under(real: str, roots: list[str]) -> bool:
    # join(root, "") ends in exactly one separator, also for the root "/".
    return any(real == root or real.startswith(os.path.join(root, "")) for root in roots)


def trigger_ready(path: str, roots: list[str] | None = None) -> bool:
    """The file exists under a root. `roots`: `trigger_roots()`, when a caller checks many."""
    real = os.path.realpath(path)
    return _under(real, trigger_roots() if roots is None else roots) and os.path.exists(real)
