"""Node health: checks that drain sick nodes, and what an admin's drain or resume does.

Every `SWITCHYARD_HEALTH_MS` each backend reports its nodes' health (`Backend.health`: the
local host's load, disk and GPU readings through a pluggable probe; Slurm's own `sinfo`).
GPU readings are held to the limits of the node's pool (`SWITCHYARD_GPU_HEALTH`).
A node that is unhealthy is drained — in the portal and in its backend — with the reason,
and an alert goes to the platform admins. A node that is down (Slurm: not responding, down;
local: marked down in the portal) has lost its work: its running tasks' attempts fail as a
node failure and are retried elsewhere, within their retries. A drained node stays drained
until an admin resumes it (docs/capacity.md).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from scheduling.backends import BackendError, Job, JobState, NodeHealth
from scheduling.decisions.gpuhealth import gpu_problems, limits_for
from scheduling.engine.follow import apply_job
from scheduling.engine.registry import get_backend
from scheduling.models import Alert, Node, TaskEvent
from scheduling.selectors.occupancy import running_on
from scheduling.selectors.site import site_view_invalidate
from scheduling.services.alerts import raise_alert

log = logging.getLogger(__name__)


def health_pass(now: datetime | None = None) -> dict[str, int]:
    now = now or timezone.now()
    drained = failed = 0
    by_backend: dict[str, list[Node]] = {}
    for node in Node.objects.select_related("pool").order_by("name"):
        by_backend.setdefault(node.pool.backend, []).append(node)
    for alias, nodes in by_backend.items():
        try:
            reports = get_backend(alias).health([n.name for n in nodes])
        except BackendError as exc:
            log.warning("health check of %s failed: %s", alias, exc)
            continue
        for node in nodes:
            report = reports.get(node.name, NodeHealth(ok=True))
            if node.state == Node.State.DOWN:  # marked down in the portal: a killed node
                report = NodeHealth(ok=False, down=True, reason=_reason(node) or "marked down")
            if node.gpus:  # a CPU node on a GPU host is not drained for the host's GPUs
                report = with_gpu_limits(report, node.pool.name)
            if report.ok:
                _record(node, report, now)
                continue
            if node.state == Node.State.UP:
                drained += drain(node, reason=report.reason, down=report.down, now=now)
            if report.down:
                failed += fail_work_on(node, reason=f"node {node.name} is down: {report.reason}")
    if drained:
        site_view_invalidate()
    return {"drained": drained, "failed": failed}


def with_gpu_limits(report: NodeHealth, pool: str) -> NodeHealth:
    """The report, unhealthy too where its GPU readings are past the pool's limits
    (settings.SWITCHYARD_GPU_HEALTH), with the GPU and its value in the reason."""
    problems = gpu_problems(report.metrics, limits_for(pool, settings.SWITCHYARD_GPU_HEALTH), pool)
    if not problems:
        return report
    reason = "; ".join([*([report.reason] if report.reason else []), *problems])
    return NodeHealth(ok=False, reason=reason, down=report.down, metrics=report.metrics)


def drain(node: Node, *, reason: str, down: bool = False, now: datetime | None = None) -> int:
    """Take a node out of service in the portal and its backend, and alert. 1 if it was up."""
    now = now or timezone.now()
    to = Node.State.DOWN if down else Node.State.DRAINED
    health = {"ok": False, "reason": reason, "at": now.isoformat(), "down": down}
    if not Node.objects.filter(pk=node.pk, state=Node.State.UP).update(state=to, health=health):
        return 0
    node.state, node.health = to, health
    try:
        get_backend(node.pool.backend).drain(node.name, reason)
    except BackendError as exc:
        log.warning("could not drain %s in its backend: %s", node.name, exc)
    raise_alert(
        Alert.Kind.NODE,
        f"node {node.name} {'down' if down else 'drained'}: {reason}",
        f"Node {node.name} of pool {node.pool.name} was taken out of service: {reason}. "
        "Resume it from the admin console once it is fixed.",
        node=node,
    )
    return 1


def resume(node: Node) -> None:
    """Back in service, in the portal and its backend."""
    Node.objects.filter(pk=node.pk).update(state=Node.State.UP, health={})
    get_backend(node.pool.backend).resume(node.name)
    site_view_invalidate()


def fail_work_on(node: Node, *, reason: str) -> int:
    """The running tasks on a lost node: their attempts end as a node failure (retried
    elsewhere while retries are left), and their jobs are cancelled."""
    failed = 0
    for occupant in running_on({node.name}):
        task = occupant.task
        backend_id = task.backend_id
        job = Job(backend_id, JobState.NODE_FAIL, reason=reason, nodes=(node.name,))
        if apply_job(task, job):
            failed += 1
            TaskEvent.objects.create(
                task=task,
                at=timezone.now(),
                from_state=task.state,
                to_state=task.state,
                message=f"its node {node.name} was lost; its job is cancelled",
            )
            try:
                get_backend(task.backend).cancel(backend_id)
            except BackendError as exc:
                log.warning(
                    "could not cancel %s on lost node %s: %s",
                    backend_id,
                    node.name,
                    exc,
                    extra={"task_id": task.pk, "job_id": backend_id},
                )
    return failed


def nodes_apply(node_ids: list[int]) -> int:
    """Carry nodes' states set in the portal to their backends (drain or resume), and for a
    node marked down, fail and retry the work that ran there."""
    done = 0
    for node in Node.objects.filter(pk__in=node_ids).select_related("pool"):
        backend = get_backend(node.pool.backend)
        reason = _reason(node) or node.state
        if node.state == Node.State.UP:
            backend.resume(node.name)
        else:
            backend.drain(node.name, reason)
        if node.state == Node.State.DOWN:
            fail_work_on(node, reason=f"node {node.name} was marked down: {reason}")
        done += 1
    site_view_invalidate()
    return done


def _record(node: Node, report: NodeHealth, now: datetime) -> None:
    if report.metrics and node.state == Node.State.UP:
        Node.objects.filter(pk=node.pk).update(
            health={"ok": True, "at": now.isoformat(), **report.metrics}
        )


def _reason(node: Node) -> str:
    return (node.health or {}).get("reason", "") if isinstance(node.health, dict) else ""
