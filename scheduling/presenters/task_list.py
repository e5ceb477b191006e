"""What the task list and the cancel confirmations say about a task: how long ago, how long
it has run or waited, on which nodes, and what cancelling it would end. Pure but for
`rows`, which reads the page's attempts in one query."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduling.decisions.humanize import count
from scheduling.models import UNSTARTED_STATES, Attempt, Task, TaskState

S = TaskState


def unstarted(task: Task) -> bool:
    """Not started yet: a level still orders it (the policy pass relevels only these)."""
    return task.state in UNSTARTED_STATES


def ago(when: datetime, now: datetime) -> str:
    """`just now`, `3 min ago`, `2 h ago`, `4 days ago` (static/switchyard.js says the same
    as time passes: keep the two in step)."""
    seconds = max(int((now - when).total_seconds()), 0)
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    days = seconds // 86400
    return f"{days} day{'s' if days != 1 else ''} ago"


def short_duration(seconds: float) -> str:
    """`45s`, `12min`, `3h05`, `2d 4h`: to the minute once it is past one."""
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}"
    return f"{hours // 24}d {hours % 24}h"


def elapsed(task: Task, now: datetime) -> str:
    """Running: since it started; ended: its run time; not started: how long it has waited."""
    if task.state == S.RUNNING and task.started_at:
        return f"running {short_duration((now - task.started_at).total_seconds())}"
    if task.is_terminal:
        if task.started_at and task.ended_at:
            return f"ran {short_duration((task.ended_at - task.started_at).total_seconds())}"
        return "never started"
    return f"waited {short_duration((now - task.submitted_at).total_seconds())}"


_NODE = re.compile(r"^(.*?)(\d+)$")


def node_span(nodes: Sequence[str]) -> str:
    """`gpu003`, `gpu004` → `gpu003-gpu004`; runs of consecutive numbered names joined, the
    rest listed: `gpu001-gpu003, cpu7`."""
    parts: list[str] = []
    run: list[str] = []

    def close() -> None:
        if run:
            parts.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
            run.clear()

    for name in nodes:
        if run and _next_of(run[-1], name):
            run.append(name)
            continue
        close()
        run.append(name)
    close()
    return ", ".join(parts)


def _next_of(previous: str, name: str) -> bool:
    a, b = _NODE.match(previous), _NODE.match(name)
    return bool(a and b and a[1] == b[1] and len(a[2]) == len(b[2]) and int(b[2]) == int(a[2]) + 1)


@dataclass(frozen=True, slots=True)
class Row:
    task: Task
    elapsed: str
    nodes: str
    ago: str


def current_nodes(task_ids: Iterable[int]) -> dict[int, list[str]]:
    """Each task's nodes: those of its latest attempt (one query for a page of tasks)."""
    latest: dict[int, list[str]] = {}
    attempts = Attempt.objects.filter(task_id__in=list(task_ids)).order_by("task_id", "number")
    for task_id, nodes in attempts.values_list("task_id", "nodes"):
        latest[task_id] = list(nodes or [])
    return latest


def rows(tasks: Iterable[Task], now: datetime) -> list[Row]:
    tasks = list(tasks)
    nodes = current_nodes(t.pk for t in tasks)
    return [
        Row(t, elapsed(t, now), node_span(nodes.get(t.pk, [])), ago(t.submitted_at, now))
        for t in tasks
    ]


def holds(task: Task, nodes: Sequence[str]) -> str:
    """What a task holds now: `16 GPUs on gpu003-gpu004`, `4 CPUs`, or `nothing yet`."""
    if task.state != S.RUNNING:
        return "nothing yet"
    what = count(task.gpus, "GPU") if task.gpus else count(task.cpus, "CPU")
    return f"{what} on {node_span(nodes)}" if nodes else what


def cancel_question(task: Task, nodes: Sequence[str]) -> str:
    """The task page's confirmation: what cancelling this task ends."""
    if task.is_terminal:
        return f"This task has already ended ({task.state}): there is nothing to cancel."
    if task.cancelling:
        return "This task is already being cancelled: a worker is ending its job."
    if task.state == S.RUNNING:
        return f"Cancel this running task holding {holds(task, nodes)}? Its job ends now."
    if task.state == S.QUEUED:
        return "Cancel this queued task? Its job is taken out of the scheduler before it starts."
    return f"Cancel this {task.state} task? It has not started; it leaves the queue."


def names(tasks: Sequence[Task], most: int = 10) -> str:
    """`a, b, c` and, past `most`, `… and 12 more`: a message stays one line."""
    more = f" and {len(tasks) - most} more" if len(tasks) > most else ""
    return ", ".join(t.name for t in tasks[:most]) + more
