"""The engine's one synchronous door (docs/sandboxes.md): live sandboxes answer a web request
in milliseconds, so their create, exec, files and end reach the backend from the request
itself, not through a Celery message. The sandbox service (scheduling/services/sandboxes.py)
is the only caller outside the engine; the layout test allows exactly that edge.

- `start`: dispatch the sandbox's task now (a warm sandbox claimed, else submitted: the
  dispatch path's own claim, admission and max_concurrency), then wait for its start on a
  backend that shows starts (local); a cluster's (Slurm) answers `starting`.
- `exec_in`, `put_file`, `get_file`: the backend call with the current attempt's job id;
  an exec is recorded with one insert when it starts and one update when it ends.
- `end`: cancel the task (its job first), now.
- `reclaim`: the timers pass's idle and lifetime ends; `warm_pass`: the warm pools.
- `after_ends`: the task-end hook that ends the sandbox row with its task (its egress
  audit kept first); `egress_requests`: that audit, live from the backend or as kept.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from config.metrics import instruments
from scheduling.backends.base import (
    BackendError,
    ExecRequest,
    ExecResult,
    SessionGone,
    WarmSpec,
)
from scheduling.backends.session.network import egress_refusal
from scheduling.decisions import lifecycle
from scheduling.decisions.images import parse_image_ref
from scheduling.engine.dispatch import claim_many, dispatch_claimed_many
from scheduling.engine.dispatch import queue_slots_taken as queue_slots_taken
from scheduling.engine.follow import apply_jobs
from scheduling.engine.jobs import CancelRetry, cancel_requested
from scheduling.engine.registry import get_backend
from scheduling.engine.sandbox_egress import egress_requests as egress_requests
from scheduling.engine.sandbox_egress import keep as keep_egress
from scheduling.models import (
    ACTIVE_STATES,
    LIVE_SANDBOX_STATES,
    Queue,
    Sandbox,
    SandboxExec,
    SandboxState,
    Task,
    TaskState,
)
from scheduling.selectors.sandboxes import with_activity
from scheduling.states import task_set_state

log = logging.getLogger(__name__)
S = TaskState
DEFAULT_IDLE_S = 120
PREVIEW_CHARS = 200


def egress_problem(allow: list[str]) -> str | None:
    """Why an allow-list may not be given to a sandbox although its queue or project lists
    it: a name that leads, now, to the portal's own database, broker, cache or web port
    (docs/sandbox-network.md). None when it may (or the list is empty)."""
    return egress_refusal(allow) if allow else None


def state_of(task: Task) -> str:
    """The sandbox state its task's state means."""
    if task.state == S.RUNNING:
        return SandboxState.READY
    if task.state in (S.SUCCEEDED, S.CANCELLED, S.TIMEOUT, S.SKIPPED):
        return SandboxState.ENDED
    if task.state == S.FAILED:
        return SandboxState.FAILED
    # Held by its quota, or by its queue's max_concurrency: before dispatch (a cluster's
    # backend, engine/dispatch.py) or in the local backend's own scheduling pass
    # (decisions/schedule.py), whose reasons both say so.
    capped = "runs its maximum of" in (task.reason or "")
    return SandboxState.QUEUED if task.state == S.WAITING or capped else SandboxState.STARTING


def start(task_id: int, *, wait_s: float) -> Task:
    """Dispatch the task now and wait up to `wait_s` for it to start, where its backend can
    say so at once. A worker that took the dispatch message first does the dispatch; this
    then only waits. Returns the task as it is then."""
    claimed = claim_many([task_id])
    if claimed:
        dispatch_claimed_many(claimed)
    deadline = time.monotonic() + wait_s
    while True:
        task = Task.objects.get(pk=task_id)
        if task.state not in (S.PENDING, S.QUEUED) or state_of(task) == SandboxState.QUEUED:
            return task
        left = deadline - time.monotonic()
        if left <= 0:
            return task
        backend = get_backend(task.backend)
        if task.state == S.QUEUED and backend.shows_starts:
            started = backend.started([task.backend_id], within_s=min(left, 1.0))
            if task.backend_id in started:
                apply_jobs([(task, started[task.backend_id])])
        elif task.state == S.QUEUED:
            return task  # a cluster's scheduler: the client polls (`starting`)
        else:
            time.sleep(min(left, 0.01))  # another dispatcher holds it


# A starting sandbox's backend is asked at most this often on its readers' behalf.
ASK_BACKEND_EVERY_S = 0.25


def may_ask_backend(sandbox_id: str) -> bool:
    """Whether a read of a starting sandbox may ask its backend now: about once per
    ASK_BACKEND_EVERY_S per sandbox across the web processes (the shared cache), not once
    per request (two readers at the same moment may both ask: a bound, not a lock)."""
    key = f"switchyard:sandbox-ask:{sandbox_id}"
    now = time.time()
    last = cache.get(key)
    if isinstance(last, float) and 0 <= now - last < ASK_BACKEND_EVERY_S:
        return False
    cache.set(key, now, timeout=60)
    return True


def refresh(task: Task) -> Task:
    """A task still starting on a backend that shows no starts at once: asked now, so that
    a client polling a `starting` sandbox sees it `ready` without waiting for the poll."""
    if task.state != S.QUEUED or not task.backend_id:
        return task
    try:
        job = get_backend(task.backend).poll([task.backend_id]).get(task.backend_id)
    except BackendError:
        return task
    if job is not None:
        apply_jobs([(task, job)])
        task.refresh_from_db()
    return task


class SandboxGone(Exception):
    """The sandbox has ended (idle, lifetime, deleted, failed): nothing runs in it now."""


class SandboxError(Exception):
    """The backend could not do what was asked (unreachable, refused, a file too large)."""


def exec_request(
    argv: list[str],
    *,
    stdin: bytes,
    env: dict[str, str],
    cwd: str | None,
    timeout_s: float,
    max_output: int,
) -> ExecRequest:
    return ExecRequest(
        argv=tuple(argv),
        stdin=stdin,
        env=tuple(sorted(env.items())),
        cwd=cwd,
        timeout_s=timeout_s,
        max_output=max_output,
    )


def exec_in(
    sandbox: Sandbox,
    request: ExecRequest,
    *,
    on_output: Callable[[str, bytes], None] | None = None,
) -> ExecResult:
    """Run one command in the sandbox: `exec_started`, `exec_run`, `exec_ended`."""
    row = exec_started(sandbox, request)
    try:
        result = exec_run(sandbox.task, request, on_output=on_output)
    except (SandboxGone, SandboxError) as exc:
        exec_ended(row, None, error=str(exc))
        raise
    exec_ended(row, result)
    return result


def exec_started(sandbox: Sandbox, request: ExecRequest) -> int:
    """The exec's row, stored as it starts (one insert): while it runs, within its timeout,
    the idle reclaim leaves the sandbox alone. Returns its id."""
    now = timezone.now()
    return SandboxExec.objects.create(
        sandbox=sandbox,
        argv=stored_argv(request.argv),
        started_at=now,
        deadline=now + timedelta(seconds=request.timeout_s + 5),
    ).pk


# What an exec's history keeps of its command: the page shows it, and a command may be
# 128 KiB (a script given inline) sent many times a second.
ARGV_KEPT_CHARS = 4096


def stored_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The command as its history keeps it: whole up to ARGV_KEPT_CHARS characters, then cut,
    the cut argument ending with how much was left out."""
    kept: list[str] = []
    room = ARGV_KEPT_CHARS
    for at, arg in enumerate(argv):
        if len(arg) <= room:
            kept.append(arg)
            room -= len(arg)
            continue
        left = len(arg) - room + sum(len(a) for a in argv[at + 1 :])
        kept.append(f"{arg[:room]}… ({left} more characters)")
        break
    return kept


def exec_run(
    task: Task,
    request: ExecRequest,
    *,
    on_output: Callable[[str, bytes], None] | None = None,
) -> ExecResult:
    """The backend call alone (no database: a streaming answer runs it in a thread)."""
    try:
        return get_backend(task.backend).exec_in(task.backend_id, request, on_output=on_output)
    except SessionGone as exc:
        raise SandboxGone(str(exc)) from exc
    except BackendError as exc:
        raise SandboxError(str(exc)) from exc


def exec_ended(row_id: int, result: ExecResult | None, *, error: str = "") -> None:
    """The exec's row completed as it ended (one update)."""
    values: dict = {"ended_at": timezone.now()}
    if result is None:
        values["error"] = error.replace("\x00", "\ufffd")[:255]
    else:
        text = (result.stdout or result.stderr)[: PREVIEW_CHARS * 4]
        values.update(
            exit_code=result.exit_code,
            duration_ms=result.duration_ms,
            stdout_bytes=len(result.stdout),
            stderr_bytes=len(result.stderr),
            timed_out=result.timed_out,
            # Text as the page shows it: PostgreSQL's text holds no NUL.
            preview=text.decode("utf-8", "replace").replace("\x00", "\ufffd")[:PREVIEW_CHARS],
        )
    SandboxExec.objects.filter(pk=row_id).update(**values)


def put_file(sandbox: Sandbox, path: str, data: bytes, *, mode: int) -> None:
    task = sandbox.task
    with _backend_errors():
        get_backend(task.backend).put_file(task.backend_id, path, data, mode=mode)
    _touch(sandbox)


def get_file(sandbox: Sandbox, path: str, *, limit: int) -> bytes:
    task = sandbox.task
    with _backend_errors():
        data = get_backend(task.backend).get_file(task.backend_id, path, limit=limit)
    _touch(sandbox)
    return data


@contextlib.contextmanager
def _backend_errors() -> Iterator[None]:
    try:
        yield
    except SessionGone as exc:
        raise SandboxGone(str(exc)) from exc
    except BackendError as exc:
        raise SandboxError(str(exc)) from exc


def _touch(sandbox: Sandbox) -> None:
    Sandbox.objects.filter(pk=sandbox.pk).update(last_active_at=timezone.now())


def end(task_id: int, *, who: str, reason: str) -> None:
    """End the sandbox's task now: a job cancelled first (all its processes gone), a task
    without one cancelled at once. A backend out of reach leaves the cancel request to the
    sweep, which carries it out later."""
    now = timezone.now()
    for _ in range(5):
        task = Task.objects.get(pk=task_id)
        if task.is_terminal:
            return
        if task.state in ACTIVE_STATES:
            Task.objects.filter(pk=task_id, state__in=ACTIVE_STATES).update(
                cancel_requested_at=task.cancel_requested_at or now,
                cancel_requested_by=who,
                reason=f"cancelling: {reason}",
                updated_at=now,
            )
            try:
                cancel_requested([task_id])
            except CancelRetry:
                log.warning(
                    "sandbox task %s: its backend is out of reach; the sweep ends it", task_id
                )
                return
        elif task_set_state(task=task, to=S.CANCELLED, reason=f"cancelled: {reason}"):
            return
        if Task.objects.filter(pk=task_id, state__in=lifecycle.TERMINAL).exists():
            return


def activity(sandboxes, now: datetime | None = None):
    """The queryset with `last_exec_end`, `busy` (an exec in flight within its deadline) and
    `execs_run` annotated: what idle time and the exec count are computed from."""
    return with_activity(sandboxes, now)


def last_active(sandbox: Sandbox, now: datetime | None = None) -> datetime:
    """When it was last used: its last exec's end (now while one runs), file transfer or
    start; `sandbox` from `activity`."""
    if getattr(sandbox, "busy", False):
        return now or timezone.now()
    times = [sandbox.last_active_at, getattr(sandbox, "last_exec_end", None)]
    return max(t for t in times if t is not None)


def reclaim(now: datetime | None = None) -> int:
    """The timers pass: live sandboxes idle past their timeout are ended ("idle"); their
    maximum lifetime is their task's walltime, which the backend enforces (and the task's
    timeout ends the sandbox through `after_ends`). Returns how many it ended."""
    now = now or timezone.now()
    ended = 0
    live = with_activity(
        Sandbox.objects.filter(state__in=LIVE_SANDBOX_STATES), now, count=False
    ).only("pk", "task_id", "idle_timeout_s", "last_active_at", "state")
    for sandbox in live:
        if sandbox.state == SandboxState.QUEUED:
            continue  # not started: nothing is idle yet
        if last_active(sandbox, now) + timedelta(seconds=sandbox.idle_timeout_s) < now:
            Sandbox.objects.filter(pk=sandbox.pk).update(end_reason="idle")
            end(
                sandbox.task_id,
                who="the idle timeout",
                reason=f"idle for {sandbox.idle_timeout_s} s",
            )
            ended += 1
    return ended


def after_ends(tasks: list[Task]) -> None:
    """The task-end hook: a sandbox ends with its task, its exec count and last activity
    written as they finally are; the sandboxes a batch task created end with it."""
    ids = [task.pk for task in tasks]
    # A batch task's sandboxes end with it: its token no longer reaches them anyway.
    for task_id in Sandbox.objects.filter(
        created_by_task_id__in=ids, state__in=LIVE_SANDBOX_STATES
    ).values_list("task_id", flat=True):
        Sandbox.objects.filter(task_id=task_id, end_reason="").update(end_reason="its task ended")
        end(task_id, who="the end of the task that created it", reason="its task ended")
    # Kept before the row says ended: the page of an ended sandbox reads the kept audit.
    keep_egress(ids)
    rows = list(
        activity(
            Sandbox.objects.filter(task_id__in=ids, state__in=LIVE_SANDBOX_STATES)
        ).select_related("task")
    )
    for sandbox in rows:
        task = sandbox.task
        Sandbox.objects.filter(pk=sandbox.pk, state__in=LIVE_SANDBOX_STATES).update(
            state=state_of(task),
            ended_at=task.ended_at or timezone.now(),
            end_reason=sandbox.end_reason or _end_reason(task),
            exec_count=sandbox.execs_run,
            last_active_at=last_active(sandbox),
        )


def _end_reason(task: Task) -> str:
    if task.state == S.TIMEOUT:
        return "max lifetime"
    if task.state == S.CANCELLED:
        return "deleted"
    return task.reason or task.state


def warm_pass(now: datetime | None = None) -> dict[str, int]:
    """Each backend's warm pools from its queues' `warm_pool`, at a sandbox's default shape
    (1 CPU, 1024 MiB). A template is kept warm while one was created from it within the
    queue's idle time, or while its pool is younger than that (first seen by this pass);
    after that it scales to zero, and the next create from it (cold) warms it again.
    Returns the warm sandboxes ready, by backend."""
    now = now or timezone.now()
    wanted: dict[str, dict[tuple[str, int, int], int]] = {}
    for queue in Queue.objects.select_related("pool").exclude(warm_pool={}):
        idle = timedelta(seconds=queue.idle_scale_in_s or DEFAULT_IDLE_S)
        used = {
            _as_named(t)
            for t in Sandbox.objects.filter(
                task__queue=queue, created_at__gte=now - idle
            ).values_list("template", flat=True)
        }
        pools = wanted.setdefault(queue.pool.backend, {})
        for template, count in (queue.warm_pool or {}).items():
            named = _as_named(template)
            if named is None:
                log.warning("warm pool of %s: %r is not an image reference", queue.name, template)
                continue
            since = _first_seen(queue.pk, named, now)
            keep = count if named in used or now - since < idle else 0
            shape = (named, 1, 1024)
            pools[shape] = pools.get(shape, 0) + keep
    out = {}
    for alias, pools in wanted.items():
        backend = get_backend(alias)
        if not backend.sessions:
            continue
        specs = [WarmSpec(t, cpus, mem, count) for (t, cpus, mem), count in sorted(pools.items())]
        try:
            views = backend.keep_warm(specs)
        except BackendError:
            log.warning("warm pool of %s: the backend refused", alias, exc_info=True)
            continue
        out[alias] = sum(v.ready for v in views)
        instruments.sandbox_warm(alias, ready=out[alias], starting=sum(v.starting for v in views))
    return out


def _as_named(template: str) -> str | None:
    """A template as a sandbox's task names it ("" the system; an image reference in full, as
    the submission writes `spec.image`), so that a pool and a claim agree; None when it is
    no reference."""
    if not template:
        return ""
    try:
        ref = parse_image_ref(template, default_registry=settings.SWITCHYARD_IMAGE_REGISTRY)
    except ValueError:  # ImageRefError, or no default registry for a short name
        return None
    return str(ref)


def _first_seen(queue_id: int, template: str, now: datetime) -> datetime:
    """When this pass first saw the queue's pool of `template` (kept in the shared cache)."""
    key = f"switchyard:warm-pool-since:{queue_id}:{template}"
    cache.add(key, now.timestamp(), timeout=None)
    return datetime.fromtimestamp(float(cache.get(key, now.timestamp())), tz=now.tzinfo)
