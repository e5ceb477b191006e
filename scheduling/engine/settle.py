"""What happens when a task ends: its dependants are settled, and its workflow follows.

A task with dependencies (or a trigger) waits in state `waiting`, holding nothing in any
backend. When a task ends, `after_ends` (registered as a task-end hook at app start) settles
its dependants at once: a dependant whose dependencies all succeeded (or were skipped) is
released to `pending` and dispatched; one whose dependency ended badly with `fail_action:
abort` is cancelled, and so on down the DAG. Every move is a compare-and-set through
`task_set_state`, so two workers settling the same dependant release it once.

The clock-driven releases live here too: wait timeouts and trigger files (docs/workflows.md).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterable
from datetime import timedelta

from django.utils import timezone

from scheduling import outbox
from scheduling.decisions import format_duration
from scheduling.decisions.lifecycle import BAD_ENDS
from scheduling.decisions.triggers import Allowed
from scheduling.models import TERMINAL_STATES, Hold, Task, TaskState, Workflow, WorkflowState
from scheduling.selectors import site_view
from scheduling.selectors.dependencies import verdict
from scheduling.services.workflows import workflow_refresh
from scheduling.states import task_set_state
from scheduling.triggers import trigger_allowed, trigger_roots, trigger_state

S = TaskState
W = WorkflowState


def after_ends(tasks: list[Task]) -> None:
    """The task-end hook: settle the dependants and the workflows of tasks that just ended."""
    for task in tasks:
        if task.workflow_id and task.state in BAD_ENDS and task.fail_action == "abort":
            Workflow.objects.filter(pk=task.workflow_id, state=W.RUNNING).update(
                state=W.FAILED, reason=f"task {task.name} ended {task.state}: {task.reason}"
            )
    # One query for all of them: a poll's hundred ended agent tasks usually have none.
    waiting = Task.objects.filter(depends_on__in=[t.pk for t in tasks], state=S.WAITING)
    settle_waiting(sorted(set(waiting.values_list("pk", flat=True))))
    for workflow_id in sorted({t.workflow_id for t in tasks if t.workflow_id}):
        workflow_refresh(workflow_id)


def settle_waiting(task_ids: Iterable[int]) -> None:
    """Release, cancel or keep waiting each task, and follow cancellations down the DAG.

    Iterative, so a long chain never hits the recursion limit.
    """
    queue = deque(task_ids)
    workflows: set[int] = set()
    while queue:
        task = Task.objects.filter(pk=queue.popleft(), state=S.WAITING).first()
        if task is None:
            continue
        deps = list(task.depends_on.order_by("id").only("id", "name", "state", "fail_action"))
        verdicts = [(dep, verdict(dep)) for dep in deps]
        blocked = [dep for dep, v in verdicts if v is False]
        if blocked:
            dep = blocked[0]
            if task_set_state(
                task=task,
                to=S.CANCELLED,
                reason=f"not run: it depends on {dep.name} (#{dep.pk}), which ended {dep.state}",
                settle=False,
            ):
                queue.extend(task.dependants.filter(state=S.WAITING).values_list("pk", flat=True))
                if task.workflow_id:
                    workflows.add(task.workflow_id)
            continue
        unfinished = [dep for dep, v in verdicts if v is None]
        if unfinished:
            names = ", ".join(dep.name for dep in unfinished[:5])
            more = f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else ""
            _set_reason(task, f"waiting for {names}{more}")
            continue
        if task.trigger_file:
            state = trigger_state(task.trigger_file, _allowed(task.pk))
            if state != "ready":
                _set_reason(task, _trigger_reason(task.trigger_file, state))
                continue
        what = "dependencies done" if deps else "no dependencies"
        if task.trigger_file:
            what += f"; trigger file {task.trigger_file} exists"
        if task_set_state(
            task=task,
            to=S.PENDING,
            reason="waiting for the dispatcher",
            message=f"released: {what}",
            # Ready from now: its levels and its queue's bound on waiting count from here.
            fields={"waiting_since": None, "ready_at": timezone.now()},
            settle=False,
        ):
            outbox.dispatch(task.pk)
    for workflow_id in workflows:
        workflow_refresh(workflow_id)


def _allowed(task_id: int) -> Allowed:
    """Where this task's trigger may lie: the folders its jobs mount, the trigger roots."""
    pool, project, user = Task.objects.values_list(
        "queue__pool__name", "project__slug", "owner__username"
    ).get(pk=task_id)
    return trigger_allowed(site_view().storage, pool=pool, project=project, user=user)


def _trigger_reason(path: str, state: str) -> str:
    if state == "link":
        # Said without where the link leads: that is not the user's to learn.
        return (
            f"waiting for the trigger file {path}, which is reached through a symbolic link "
            "(the file or a folder on its way): links are not followed, so it is not looked at"
        )
    if state == "outside":
        return f"waiting for the trigger file {path}, which lies outside the folders its jobs mount"
    return f"waiting for the trigger file {path}"


def _set_reason(task: Task, reason: str) -> None:
    if task.reason != reason:
        Task.objects.filter(pk=task.pk, state=S.WAITING).update(
            reason=reason, updated_at=timezone.now()
        )


def settle_stranded() -> int:
    """Settle the waiting tasks whose dependencies have all ended: the end message that was
    to settle them was lost (a broker down when a user cancelled the last one). A timers
    pass reads only those; tasks that also wait for a trigger file are left to their own
    pass. Returns how many were looked at."""
    unfinished = [state for state in S.values if state not in TERMINAL_STATES]
    stranded = list(
        Task.objects.filter(state=S.WAITING, depends_on__isnull=False, trigger_file="")
        .exclude(hold=Hold.QUOTA)
        .exclude(depends_on__state__in=unfinished)
        .values_list("pk", flat=True)
        .distinct()
        .order_by("pk")
    )
    settle_waiting(stranded)
    return len(stranded)


def expire_waiting(now=None) -> int:
    """End tasks that waited longer than their wait_timeout; their fail_action applies."""
    now = now or timezone.now()
    ended = 0
    # Every timers pass reads the waiting tasks that have a timeout: three columns each, and
    # whole rows only for those that expire.
    expired = [
        pk
        for pk, since, timeout_s in Task.objects.filter(
            state=S.WAITING, wait_timeout_s__isnull=False, waiting_since__isnull=False
        ).values_list("pk", "waiting_since", "wait_timeout_s")
        if since is not None
        and timeout_s is not None
        and since + timedelta(seconds=timeout_s) <= now
    ]
    for task in Task.objects.filter(pk__in=expired, state=S.WAITING).order_by("pk"):
        limit = format_duration(task.wait_timeout_s or 0)
        to = S.SKIPPED if task.fail_action == "skip" else S.CANCELLED
        if task_set_state(
            task=task, to=to, reason=f"waited longer than its wait_timeout ({limit}); {task.reason}"
        ):
            ended += 1
    return ended


# The folders of the trigger files this process watches: folder -> (its mtime when its tasks
# were last looked at, the ids of those tasks). A pass looks at a task only when its folder
# changed since, or the task is new to it.
_watched: dict[str, tuple[int, frozenset[int]]] = {}
# A folder changed this recently may change again without its mtime moving (the kernel's
# timestamps are coarse): it is looked at again until it has been still for this long.
SETTLED_NS = 2_000_000_000


def check_triggers() -> int:
    """Release the waiting tasks whose trigger file appeared; returns how many were looked at.

    Watches the folders, not the tasks: the waiting tasks' trigger files are read in one
    query and grouped by folder; each folder is stat'ed once, and only the tasks of a folder
    whose mtime moved (a file created, renamed or linked there) are looked at. A pass over
    thousands of unchanged triggers costs a query and a stat per folder, and writes nothing.
    Quota-held tasks passed their trigger already: the quota releases them.
    """
    folders: dict[str, list[tuple[int, str, tuple[str, str, str]]]] = {}
    waiting = (
        Task.objects.filter(state=S.WAITING)
        .exclude(trigger_file="")
        .exclude(hold=Hold.QUOTA)
        .values_list("pk", "trigger_file", "queue__pool__name", "project__slug", "owner__username")
    )
    for pk, path, pool, project, user in waiting:
        folders.setdefault(os.path.dirname(path), []).append((pk, path, (pool, project, user)))
    now_ns = time.time_ns()
    roots: list[str] | None = None  # resolved once, when some folder changed
    # (pool, project, user) → where their triggers may lie, resolved once a pass.
    allowed: dict[tuple[str, str, str], Allowed] = {}
    changed: list[int] = []
    looked = 0
    for folder, tasks in folders.items():
        try:
            mtime = os.stat(folder).st_mtime_ns
        except OSError:
            mtime = -1  # not there (yet): its creation changes it
        ids = frozenset(pk for pk, _, _ in tasks)
        seen = _watched.get(folder)
        if seen is not None and seen[0] == mtime and ids <= seen[1]:
            continue
        looked += len(tasks)
        roots = trigger_roots() if roots is None else roots
        for pk, path, whose in tasks:
            if whose not in allowed:
                pool, project, user = whose
                allowed[whose] = trigger_allowed(
                    site_view().storage, pool=pool, project=project, user=user, roots=roots
                )
            # A file that appeared releases its task; a link that now leads out changes
            # its reason. Either way the task is settled again, which checks once more.
            if trigger_state(path, allowed[whose]) != "absent":
                changed.append(pk)
        still = now_ns - mtime > SETTLED_NS
        _watched[folder] = (mtime if still else -2, ids)
    for folder in _watched.keys() - folders.keys():
        del _watched[folder]  # no task waits on it now
    if changed:
        settle_waiting(sorted(changed))
    return looked
