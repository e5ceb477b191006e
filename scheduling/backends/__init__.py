"""Compute backends behind one small protocol (`base.py`); the engine builds them by alias
(`scheduling/engine/registry.py`) and is the only code that calls them."""

from __future__ import annotations

from scheduling.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    ImagePull,
    Job,
    JobState,
    LeaseView,
    NodeHealth,
    Run,
    SubmitRequest,
)

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "ImagePull",
    "Job",
    "JobState",
    "LeaseView",
    "NodeHealth",
    "Run",
    "SubmitRequest",
]
