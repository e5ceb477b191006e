"""The Django side of bench/live_day.py: submit the day, read it back as a simulator `Run`.

Imported only once Django is set up on the run's own var dir (bench/live_day.py does it).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from datetime import datetime

from django.contrib.auth.models import User

from portal.models import Membership, Project
from scheduling.decisions.types import NodeAllocation
from scheduling.management.commands.seed_demo import give_site_quotas
from scheduling.models import Attempt, Queue, Task
from scheduling.services.tasks import task_submit
from scheduling.sites import default_site
from simulation.simulator import criteria
from simulation.simulator.metrics import summary
from simulation.simulator.model import Outcome, Run, SimJob, Span
from simulation.simulator.workloads import DAY_HOURS, HOUR, site_model, validation_day

TERMINAL = ("succeeded", "failed", "cancelled", "timeout", "skipped")


def day_jobs(seed: int) -> list[SimJob]:
    return sorted(validation_day(seed), key=lambda j: j.submit)


def prepare_accounts(jobs: list[SimJob], username: str) -> User:
    """One researcher, a member of every project of the day, each project with the site's
    quotas (as `seed_demo` gives its own projects)."""
    user, _ = User.objects.get_or_create(username=username)
    site = default_site()
    queues = {q.name: q for q in Queue.objects.all()}
    for slug in sorted({j.project for j in jobs}):
        project, _ = Project.objects.get_or_create(slug=slug, defaults={"name": slug, "pi": user})
        Membership.objects.get_or_create(user=user, project=project)
        give_site_quotas(project, site, queues)
    return user


def descriptor(job: SimJob, speed: float) -> str:
    """The job as a researcher would submit it, its times scaled by `speed`."""
    r = job.spec.resources
    walltime = job.spec.walltime_s or math.ceil(job.runtime)
    resources: dict = {"cpus": r.cpus, "memory": f"{r.memory_mib}Mi"}
    if r.gpus:
        resources["gpus"] = r.gpus
    if r.nodes:
        resources["nodes"] = r.nodes
    doc: dict = {
        "apiVersion": "switchyard/v1",
        "kind": "Task",
        "name": job.key,
        "project": job.project,
        "type": job.type,
        "queue": job.queue,
        "resources": resources,
        "walltime": max(1, math.ceil(walltime * speed)),
        "command": ["sleep", f"{job.runtime * speed:.3f}"],
    }
    if job.spec.estimate_s:
        doc["estimate"] = min(doc["walltime"], max(1, math.ceil(job.spec.estimate_s * speed)))
    return json.dumps(doc)


def submit_all(jobs: list[SimJob], user: User, t0: float, speed: float, errors: list) -> None:
    """Each job at its time: through the portal's submission service, as the API does."""
    from django.db import connection

    try:
        for job in jobs:
            delay = t0 + job.submit * speed - time.time()
            if delay > 0:
                time.sleep(delay)
            try:
                task_submit(user=user, text=descriptor(job, speed), fmt="json")
            except Exception as exc:  # noqa: BLE001 - counted and reported by the caller
                errors.append(f"{job.key}: {exc}")
    finally:
        connection.close()


def states() -> dict[str, int]:
    return dict(Counter(Task.objects.values_list("state", flat=True)))


def all_ended(expected: int) -> bool:
    return Task.objects.filter(state__in=TERMINAL).count() >= expected


def progress(t0: float, speed: float) -> None:
    day_h = (time.time() - t0) / speed / HOUR
    print(f"  day {day_h:5.2f} h: {states()}", file=sys.stderr, flush=True)


def _at(when: datetime | None, t0: float, speed: float) -> float | None:
    return None if when is None else (when.timestamp() - t0) / speed


def _allocations(nodes: list[str], cpus: int, gpus: int) -> tuple[NodeAllocation, ...]:
    """The attempt's share of each of its nodes (an even split: attempts record their nodes,
    not each node's share)."""
    if not nodes:
        return ()
    n = len(nodes)
    per_gpu = gpus // n
    return tuple(
        NodeAllocation(node, cpus // n, 0, tuple(range(per_gpu))) for node in sorted(nodes)
    )


def recorded_run(t0: float, speed: float) -> Run:
    """What the portal recorded, in day seconds, as the simulator's `Run`."""
    run = Run("switchyard")
    tasks = {t.pk: t for t in Task.objects.select_related("queue")}
    attempts: dict[int, list[Attempt]] = {}
    for a in Attempt.objects.order_by("task_id", "number"):
        attempts.setdefault(a.task_id, []).append(a)
    for task in tasks.values():
        spec = task.spec
        res = spec.get("resources", {})
        cpus, gpus = int(res.get("cpus", 1)), int(res.get("gpus", 0) or 0)
        key = task.name
        submit = _at(task.submitted_at, t0, speed)
        started = [a for a in attempts.get(task.pk, []) if a.started_at is not None]
        for a in started:
            run.spans.append(
                Span(
                    key,
                    task.type,
                    _at(a.started_at, t0, speed),
                    _at(a.ended_at or a.started_at, t0, speed),
                    _allocations(a.nodes, cpus, gpus),
                    "preempted" if a.state == "preempted" else "done",
                )
            )
        last = started[-1] if started else None
        if task.state != "succeeded" or last is None or submit is None:
            run.never[key] = f"{task.state}: {task.reason}"
            run.never_types[key] = task.type
            continue
        start = _at(last.started_at, t0, speed)
        run.outcomes[key] = Outcome(
            key,
            task.type,
            task.project.slug,
            submit,
            start,
            _at(last.ended_at, t0, speed),
            start + (spec.get("walltime_s") or 0) / speed,
            _allocations(last.nodes, cpus, gpus),
            attempts=len(started),
            first_start=_at(started[0].started_at, t0, speed),
        )
    _mark_room_at_submit(run)
    return run


def _mark_room_at_submit(run: Run) -> None:
    """Whether each training's pool could have started it when it arrived: enough GPUs free
    on enough of the pool's nodes by the recorded spans, and no training waiting before it."""
    site = site_model(default_site())
    pool = site.pools[site.queues["training"].pool]
    size = {n.name: n.gpus for n in pool}
    trainings = sorted(
        (o for o in run.outcomes.values() if o.type == "ai-training"), key=lambda o: o.submit
    )
    for o in trainings:
        at = o.submit
        if any(p.submit < at < (p.first_start or p.start) for p in trainings if p is not o):
            o.room_at_submit = False
            continue
        used = Counter()
        for s in run.spans:
            if s.start <= at < s.end:
                for a in s.allocations:
                    used[a.node] += len(a.gpu_indices)
        nodes = max(1, len({a.node for a in o.allocations}))
        per_node = sum(len(a.gpu_indices) for a in o.allocations) // nodes
        free = sum(1 for name, gpus in size.items() if gpus - used[name] >= per_node)
        o.room_at_submit = free >= nodes


def compare(seed: int, live: Run, speed: float) -> dict:
    """The simulator's criteria for the day beside the same criteria on the live run."""
    report = criteria.validation_day_report(seed)
    site = site_model(default_site())
    live_summary = summary(live, site.pools, window=(0.0, DAY_HOURS * HOUR))
    rows = []
    for c, row in zip(criteria.CRITERIA, report["criteria"], strict=True):
        value = c.measure(live, live_summary)
        passed = value is not None and c.passes(value, row["before"])
        rows.append(
            {
                "criterion": c.name,
                "target": row["target"],
                "unit": c.unit,
                "simulator": row["values"]["switchyard"],
                "simulator_passed": row["passed"],
                "fifo": row["values"]["fifo"],
                "live": value,
                "live_passed": passed,
                "agree": passed == row["passed"],
            }
        )
    return {
        "seed": seed,
        "speed": speed,
        "jobs": report["jobs"],
        "live_never": dict(Counter(v.split(":")[0] for v in live.never.values())),
        "criteria": rows,
    }


def format_comparison(result: dict) -> str:
    head = (
        f"Validation day, seed {result['seed']}, live at x{result['speed']} "
        f"({result['jobs']} jobs; not run to success: {result['live_never'] or 'none'})\n\n"
        "| criterion | target | simulator | live | FIFO (simulator) | agree |\n"
        "|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in result["criteria"]:
        unit = r["unit"]

        def show(value, passed, unit=unit):
            return f"{criteria.format_value(value, unit)} ({'pass' if passed else 'FAIL'})"

        lines.append(
            f"| {r['criterion']} | {r['target']} | {show(r['simulator'], r['simulator_passed'])}"
            f" | {show(r['live'], r['live_passed'])} | {criteria.format_value(r['fifo'], unit)}"
            f" | {'yes' if r['agree'] else 'NO'} |"
        )
    return "\n".join(lines)
