"""`/metrics`: what the processes recorded (config/metrics/instruments.py), merged from every
role's folder, and what is read when Prometheus scrapes: tasks waiting and running, nodes,
allocated cores and GPUs, live sandboxes, Celery queue depth, metering lag, reconciliation.

Each part read at scrape time is a few grouped queries; one that fails (the database down)
is left out and `switchyard_scrape_failed{part}` says so, so the process metrics still arrive
and an alert can fire on them. docs/operations.md, "Metrics", lists every series.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

from accounting.selectors import latest_reconciliations, metering_backlog
from config.metrics import files
from config.metrics.access import scrape_allowed
from config.metrics.broker import queue_lengths
from scheduling.decisions.levels import LEVELS
from scheduling.usage import active_task_groups, live_sandboxes, node_groups, used_gpus_last_hour

log = logging.getLogger(__name__)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def task_families(now) -> Iterator[Metric]:
    tasks = _gauge("switchyard_tasks", "Tasks waiting or running.", ["queue", "level", "state"])
    oldest = _gauge(
        "switchyard_oldest_waiting_seconds",
        "How long the longest-waiting task that could run has waited (since ready).",
        ["queue", "type"],
    )
    counts: dict[tuple[str, str, str], int] = {}
    allocated: dict[tuple[str, str], int] = {}
    waits: dict[tuple[str, str], float] = {}
    for g in active_task_groups():
        state = "running" if g.running else "waiting"
        level = LEVELS[g.level] if 0 <= g.level < len(LEVELS) else str(g.level)
        counts[(g.queue, level, state)] = counts.get((g.queue, level, state), 0) + g.count
        if g.running:
            for resource, amount in (("cpus", g.cpus), ("gpus", g.gpus)):
                allocated[(g.pool, resource)] = allocated.get((g.pool, resource), 0) + amount
        elif g.ready_since is not None:
            waited = max((now - g.ready_since).total_seconds(), 0.0)
            waits[(g.queue, g.type)] = max(waits.get((g.queue, g.type), 0.0), waited)
    for labels, count in sorted(counts.items()):
        tasks.add_metric(list(labels), count)
    for (queue, task_type), waited in sorted(waits.items()):
        oldest.add_metric([queue, task_type], waited)
    yield tasks
    yield oldest
    yield from pool_families(allocated)


def pool_families(allocated: dict[tuple[str, str], int]) -> Iterator[Metric]:
    """Nodes by state, and cores and GPUs per pool: `total` (every node), `up` (nodes in
    service), `allocated` (what running tasks hold) and, for GPUs, `used_last_hour`: the
    GPUs its jobs were seen using on average over the last hour, from the attempts metered
    (ended ones: docs/operations.md, "GPU use and GPU health")."""
    nodes = _gauge("switchyard_nodes", "Nodes by pool and state.", ["pool", "state"])
    resources = {
        "cpus": _gauge("switchyard_pool_cpus", "CPU cores of a pool.", ["pool", "measure"]),
        "gpus": _gauge("switchyard_pool_gpus", "GPUs of a pool.", ["pool", "measure"]),
    }
    sums: dict[tuple[str, str, str], float] = {}
    for g in node_groups():
        nodes.add_metric([g.pool, g.state], g.count)
        for resource, amount in (("cpus", g.cpus), ("gpus", g.gpus)):
            for measure in ("total", "up") if g.state == "up" else ("total",):
                key = (g.pool, resource, measure)
                sums[key] = sums.get(key, 0) + amount
    for pool in {pool for pool, _, _ in sums}:
        for resource in resources:
            sums[(pool, resource, "allocated")] = allocated.get((pool, resource), 0)
    used = used_gpus_last_hour()
    for pool in {pool for pool, resource, _ in sums if resource == "gpus"}:
        sums[(pool, "gpus", "used_last_hour")] = used.get(pool, 0.0)
    for (pool, resource, measure), value in sorted(sums.items()):
        resources[resource].add_metric([pool, measure], value)
    yield nodes
    yield from resources.values()


def sandbox_families(now) -> Iterator[Metric]:
    live = _gauge("switchyard_sandboxes", "Live sandboxes by state.", ["state"])
    for state, count in sorted(live_sandboxes().items()):
        live.add_metric([state], count)
    yield live


def broker_families(now) -> Iterator[Metric]:
    depth = _gauge("switchyard_celery_queue_length", "Celery messages waiting.", ["queue"])
    for queue, count in queue_lengths().items():
        depth.add_metric([queue], count)
    yield depth


def accounting_families(now) -> Iterator[Metric]:
    backlog = metering_backlog(now)
    lag = 0.0 if backlog.oldest_end is None else (now - backlog.oldest_end).total_seconds()
    yield GaugeMetricFamily(
        "switchyard_metering_lag_seconds",
        "How long the oldest ended, unmetered attempt has waited for its usage (0: none).",
        value=max(lag, 0.0),
    )
    yield GaugeMetricFamily(
        "switchyard_metering_backlog_attempts",
        "Ended attempts not metered yet.",
        value=backlog.attempts,
    )
    outcome = _gauge(
        "switchyard_reconciliation_outcome",
        "1 for the outcome of each backend's last reconciliation (clean, differences, failed).",
        ["backend", "outcome"],
    )
    differences = _gauge(
        "switchyard_reconciliation_differences",
        "Records that differed in each backend's last reconciliation.",
        ["backend"],
    )
    ran = _gauge(
        "switchyard_reconciliation_last_run_timestamp_seconds",
        "When each backend was last reconciled.",
        ["backend"],
    )
    for result in latest_reconciliations():
        for choice in type(result).Outcome.values:
            outcome.add_metric([result.backend, choice], 1 if result.outcome == choice else 0)
        differences.add_metric([result.backend], result.differences)
        ran.add_metric([result.backend], result.ran_at.timestamp())
    yield from (outcome, differences, ran)


PARTS: dict[str, Callable[[Any], Iterator[Metric]]] = {
    "tasks": task_families,
    "sandboxes": sandbox_families,
    "broker": broker_families,
    "accounting": accounting_families,
}


class ScrapeCollector:
    """Reads each part now; a part that fails is left out and counted as failed."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        failed = _gauge(
            "switchyard_scrape_failed", "1 when a part could not be read now.", ["part"]
        )
        for part, read in PARTS.items():
            try:
                families = list(read(now))
            except Exception:  # noqa: BLE001 - the rest of the scrape still answers
                log.warning("metrics: %s could not be read", part, exc_info=True)
                failed.add_metric([part], 1)
                continue
            failed.add_metric([part], 0)
            yield from families
        yield failed


class RoleFiles:
    """Every role's samples (web, worker, beat; each process's files), merged into one
    series per label set."""

    def collect(self) -> Iterator[Metric]:
        paths = [
            str(path)
            for folder in files.all_role_dirs(settings.SWITCHYARD_METRICS_DIR)
            for path in sorted(folder.glob("*.db"))
        ]
        return iter(MultiProcessCollector.merge(paths, accumulate=True))


class ThisProcess:
    """The process's own registry, where no launcher gave it a folder (runserver, tests)."""

    def collect(self) -> Iterator[Metric]:
        return iter(REGISTRY.collect())


def exposition() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RoleFiles() if files.ENV in os.environ else ThisProcess())
    registry.register(ScrapeCollector())
    return generate_latest(registry)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not settings.SWITCHYARD_METRICS:
        raise Http404("metrics are off (SWITCHYARD_METRICS=0)")
    if not scrape_allowed(request):
        return HttpResponseForbidden(
            "metrics: this address may not scrape (SWITCHYARD_METRICS_ALLOW) and no valid "
            "bearer token (SWITCHYARD_METRICS_TOKEN) was sent\n",
            content_type="text/plain",
        )
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
