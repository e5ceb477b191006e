"""What the portal's processes record, as they work: submissions, refusals, decision time,
dispatch and start latency, backend calls, Celery task failures, the beat's and the worker's
heartbeats and the warm sandbox pools. What is read from the database when `/metrics` is
scraped (tasks waiting, nodes, allocation, metering lag …) is in `config.metrics.scrape`.

Labels are the site's own few names (task types, queues, backends, operations), never a task,
a user or a project: each label value is a series Prometheus keeps. Every record checks
`SWITCHYARD_METRICS` first, so with metrics off nothing is written anywhere.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable

from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram

# Seconds, from a fast decision to a training's day in the queue.
_DECISION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400)
_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)

TASKS_SUBMITTED = Counter(
    "switchyard_tasks_submitted",
    "Tasks stored by a submission (form, API, batch, workflow, sandbox).",
    ["type", "queue"],
)
TASKS_REFUSED = Counter(
    "switchyard_tasks_refused",
    "Submissions refused, by what was wrong (the error's field, or quota_full).",
    ["type", "queue", "reason"],
)
DECISION_SECONDS = Histogram(
    "switchyard_decision_seconds",
    "Time to classify, route and check one task against the site and its quotas.",
    buckets=_DECISION_BUCKETS,
)
DISPATCH_LATENCY = Histogram(
    "switchyard_dispatch_latency_seconds",
    "From submission to the backend taking the task's first job.",
    ["type", "backend"],
    buckets=_LATENCY_BUCKETS,
)
START_LATENCY = Histogram(
    "switchyard_start_latency_seconds",
    "From submission to the task first running.",
    ["type", "backend"],
    buckets=_LATENCY_BUCKETS,
)
BACKEND_CALL_SECONDS = Histogram(
    "switchyard_backend_call_seconds",
    "Calls into a compute backend, by operation.",
    ["backend", "operation"],
    buckets=_CALL_BUCKETS,
)
BACKEND_ERRORS = Counter(
    "switchyard_backend_errors",
    "Backend calls (or jobs of a submit) that failed: unavailable, refused or exception.",
    ["backend", "operation", "error"],
)
CELERY_TASK_FAILURES = Counter(
    "switchyard_celery_task_failures",
    "Celery tasks that raised, by task name.",
    ["task"],
)
WORKER_HEARTBEAT = Gauge(
    "switchyard_worker_last_task_timestamp_seconds",
    "When a Celery worker last finished a task (the beat sends passes every few seconds).",
    multiprocess_mode="max",
)
BEAT_HEARTBEAT = Gauge(
    "switchyard_beat_last_tick_timestamp_seconds",
    "When the beat that holds the site's lock last ticked.",
    multiprocess_mode="max",
)
SANDBOX_WARM = Gauge(
    "switchyard_sandbox_warm",
    "Warm sandboxes of a backend's pools, ready or starting, as the warm pass last saw them.",
    ["backend", "state"],
    multiprocess_mode="mostrecent",
)


def enabled() -> bool:
    return settings.SWITCHYARD_METRICS


def submitted(decided: Iterable[tuple[str, str]]) -> None:
    """Tasks stored, as (type, queue) pairs: one increment per pair, however many tasks."""
    if not enabled():
        return
    for (task_type, queue), n in Tally(decided).items():
        TASKS_SUBMITTED.labels(task_type, queue).inc(n)


def refused(task_type: str, queue: str, reason: str) -> None:
    if enabled():
        TASKS_REFUSED.labels(task_type, queue, reason).inc()


def decision_took(seconds: float) -> None:
    if enabled():
        DECISION_SECONDS.observe(seconds)


def dispatched(task_type: str, backend: str, seconds: float) -> None:
    if enabled():
        DISPATCH_LATENCY.labels(task_type, backend).observe(max(seconds, 0.0))


def started(task_type: str, backend: str, seconds: float) -> None:
    if enabled():
        START_LATENCY.labels(task_type, backend).observe(max(seconds, 0.0))


def backend_call(backend: str, operation: str, seconds: float, error: str | None) -> None:
    if not enabled():
        return
    BACKEND_CALL_SECONDS.labels(backend, operation).observe(seconds)
    if error is not None:
        BACKEND_ERRORS.labels(backend, operation, error).inc()


def backend_errors(backend: str, operation: str, error: str, n: int) -> None:
    if enabled() and n:
        BACKEND_ERRORS.labels(backend, operation, error).inc(n)


def celery_task_failed(name: str) -> None:
    if enabled():
        CELERY_TASK_FAILURES.labels(name).inc()


def worker_alive() -> None:
    if enabled():
        WORKER_HEARTBEAT.set(time.time())


def beat_alive() -> None:
    if enabled():
        BEAT_HEARTBEAT.set(time.time())


def sandbox_warm(backend: str, *, ready: int, starting: int) -> None:
    if enabled():
        SANDBOX_WARM.labels(backend, "ready").set(ready)
        SANDBOX_WARM.labels(backend, "starting").set(starting)
