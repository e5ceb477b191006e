"""Live sandboxes (docs/sandboxes.md): create, exec, files, delete.

A sandbox is a task of type `sandbox` stored by the ordinary submission (`task_submit_spec`:
routing, the queue's checks, quotas), with the session fields set: `session_idle_s`, its
`egress` and its maximum lifetime as walltime. What comes next must answer within
milliseconds, so it goes through the engine's one synchronous door
(scheduling/engine/sandboxes.py) rather than a Celery message: dispatch now (a warm sandbox
claimed, else submitted), wait for the start where the backend shows it, exec, files, end.
"""

from __future__ import annotations

import base64
import codecs
import json
import queue as queues
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from django import db
from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone

import scheduling.engine.sandboxes as door
from portal import hot
from portal.errors import ApplicationError
from portal.models import Project
from portal.selectors import project_get_for_member
from scheduling import decisions
from scheduling.decisions.sandboxes import concurrency, outside_allowed
from scheduling.decisions.types import QueuePolicy
from scheduling.models import ACTIVE_STATES, Queue, Sandbox, SandboxState, Task
from scheduling.selectors import site_view
from scheduling.services import sandbox_calls as calls
from scheduling.services.sandbox_input import (
    ExecAsk,
    exec_ask,
    int_field,
    known_object,
    network,
)
from scheduling.services.tasks import task_submit_spec
from scheduling.spec import Resources, TaskSpec
from scheduling.tokens import PREFIX as TASK_TOKEN_PREFIX
from scheduling.tokens import TaskScope, check

DEFAULT_IDLE_S = door.DEFAULT_IDLE_S


@dataclass(frozen=True, slots=True)
class Created:
    sandbox: Sandbox
    status: int  # 201 ready, 202 starting or queued


def sandbox_create(*, user: User, data: dict[str, Any], scope: TaskScope | None = None) -> Created:
    """Store and start a sandbox as `data` (the API's body) asks; a 409 names the reason
    when its queue refuses over max_concurrency. A call of the user's (sandbox_calls.py):
    it may wait for the start, so it takes a slot before anything is stored."""
    with calls.slot(user.pk):
        return _create(user=user, data=data, scope=scope)


def _create(*, user: User, data: dict[str, Any], scope: TaskScope | None) -> Created:
    known_object(data, _CREATE_FIELDS)
    slug = data.get("project")
    if not isinstance(slug, str) or not slug:
        raise ApplicationError("expected a project slug", field="project", got=slug)
    if scope is not None and slug != scope.project:
        raise ApplicationError(
            "this task's token may create sandboxes only in its own project",
            field="project",
            got=slug,
        )
    project = hot.member_project(user, slug) or project_get_for_member(user, slug)
    template = data.get("template", data.get("image")) or ""
    if not isinstance(template, str) or len(template) > 255:
        raise ApplicationError('expected an image reference or ""', field="template", got=template)
    cpus = int_field(data, "cpus", 1, 1, 256)
    memory_mb = int_field(data, "memory_mb", 1024, 16, 1 << 20)
    allow = network(data.get("network"))
    # Routed as any sandbox task: the queue's limits apply to what is asked.
    probe = TaskSpec(
        name="sandbox",
        project=slug,
        type="sandbox",
        resources=Resources(cpus=cpus, memory_mib=memory_mb),
        image=template or None,
    )
    site = site_view()
    routed = decisions.route(probe, "sandbox", site.rules, site.queues)
    if isinstance(routed, decisions.Refused):
        raise ApplicationError(routed.reason, field=routed.field)
    queue_name = routed.queue  # named in the task's spec below: a canary does not move it
    queue = site.queues[queue_name]
    queue_idle = queue.idle_scale_in_s or DEFAULT_IDLE_S
    idle = int_field(data, "idle_timeout_s", queue_idle, 1, queue_idle)
    longest = queue.max_walltime_s
    lifetime = int_field(
        data, "max_lifetime_s", queue.default_walltime_s or longest or 3600, 1, longest
    )
    if allow:
        _check_egress(allow, Queue.objects.get(name=queue_name), project)
        if why := door.egress_problem(allow):
            raise ApplicationError(why, field="network.allow", got=allow)
    verdict = _concurrency(queue, site.queue_ids[queue_name])
    if verdict.verdict == "refuse":
        raise ApplicationError(f"refused: {verdict.reason}", field=None, status=409)
    spec = TaskSpec(
        name="sandbox",
        project=slug,
        type="sandbox",
        queue=queue_name,
        resources=probe.resources,
        image=template or None,
        walltime_s=lifetime,
        session_idle_s=idle,
        egress=tuple(allow),
    )
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Task",
        "name": "sandbox",
        "project": slug,
        "type": "sandbox",
        "resources": {"cpus": cpus, "memory": f"{memory_mb}Mi"},
        "walltime": f"{lifetime}s",
        **({"image": template} if template else {}),
    }
    task = task_submit_spec(user=user, spec=spec, descriptor=json.dumps(doc), fmt="json")
    now = timezone.now()
    sandbox = Sandbox.objects.create(
        task=task,
        project=project,
        owner=user,
        template=template,
        cpus=cpus,
        memory_mb=memory_mb,
        idle_timeout_s=idle,
        max_lifetime_s=lifetime,
        egress=list(allow),
        state=SandboxState.QUEUED if verdict.verdict == "queue" else SandboxState.STARTING,
        created_at=now,
        last_active_at=now,
        created_by_task_id=scope.task_id if scope is not None else None,
    )
    wait = 0.0 if verdict.verdict == "queue" else settings.SWITCHYARD_SANDBOX_START_WAIT_SECONDS
    sandbox.task = door.start(task.pk, wait_s=wait)
    sandbox = _synced(sandbox, limited=False)
    if sandbox.state == SandboxState.FAILED:
        raise ApplicationError(sandbox.task.reason or "the sandbox failed to start", status=409)
    return Created(sandbox, 201 if sandbox.state == SandboxState.READY else 202)


_CREATE_FIELDS = frozenset(
    {
        "project",
        "template",
        "image",
        "cpus",
        "memory_mb",
        "idle_timeout_s",
        "max_lifetime_s",
        "network",
    }
)


def _check_egress(allow: list[str], queue: Queue, project: Project) -> None:
    allowed = [*(queue.egress_allow or []), *(project.sandbox_egress or [])]
    outside = outside_allowed(allow, allowed)
    if outside:
        listed = ", ".join(allowed) or "nothing"
        raise ApplicationError(
            f"not on the allow-list of queue {queue.name} or project {project.slug} "
            f"(they allow: {listed})",
            field="network.allow",
            got=outside[0],
        )


def _concurrency(queue: QueuePolicy, queue_id: int):
    """The create's answer from max_concurrency before anything is stored (the dispatch
    decides again, under the queue's lock: engine/dispatch.py)."""
    if queue.max_concurrency is None:
        return concurrency(0, None, queue.over_concurrency, queue.name)
    taken = door.queue_slots_taken(queue_id)
    return concurrency(taken, queue.max_concurrency, queue.over_concurrency, queue.name)


def _synced(sandbox: Sandbox, *, limited: bool = True) -> Sandbox:
    """The row in line with its task (started: ready, with the start as its ready time). A
    sandbox still starting is asked of its backend, `limited` to once a second (a client
    polling it, or execs sent to it, do not each run the cluster's squeue)."""
    task = sandbox.task
    if sandbox.state in (SandboxState.STARTING, SandboxState.QUEUED) and (
        not limited or door.may_ask_backend(sandbox.public_id)
    ):
        task = door.refresh(task)
        sandbox.task = task
    state = door.state_of(task)
    if state == sandbox.state:
        return sandbox
    values: dict[str, Any] = {"state": state}
    if state == SandboxState.READY and sandbox.ready_at is None:
        values["ready_at"] = task.started_at or timezone.now()
    if state in (SandboxState.ENDED, SandboxState.FAILED):
        values["ended_at"] = sandbox.ended_at or task.ended_at or timezone.now()
        values["end_reason"] = sandbox.end_reason or task.reason
    live = Q(state__in=[SandboxState.STARTING, SandboxState.QUEUED, SandboxState.READY])
    Sandbox.objects.filter(live, pk=sandbox.pk).update(**values)
    for name, value in values.items():
        setattr(sandbox, name, value)
    return sandbox


def sandbox_refresh(sandbox: Sandbox) -> Sandbox:
    """The sandbox as it is now (a starting one asked of its backend)."""
    return _synced(sandbox)


def _ready(sandbox: Sandbox) -> Sandbox:
    sandbox = _synced(sandbox)
    if sandbox.state != SandboxState.READY:
        ended = sandbox.state in (SandboxState.ENDED, SandboxState.FAILED)
        what = f"has ended ({sandbox.end_reason})" if ended else f"is {sandbox.state}, not ready"
        raise ApplicationError(f"the sandbox {what}", field="state", got=sandbox.state, status=409)
    return sandbox


def _gone(sandbox: Sandbox, exc: Exception) -> ApplicationError:
    sandbox.task.refresh_from_db()
    _synced(sandbox)
    return ApplicationError(f"the sandbox has ended: {exc}", field="state", status=409)


def _output(data: bytes, binary: bool, name: str) -> dict[str, str]:
    if binary:
        return {f"{name}_b64": base64.b64encode(data).decode()}
    return {name: data.decode("utf-8", "replace")}


def sandbox_exec(*, user: User, sandbox: Sandbox, ask: ExecAsk) -> dict[str, Any]:
    """Run one command; the answer {"stdout", "stderr", "exit_code", "duration_ms",
    "timed_out", "truncated"} (with `binary`: "stdout_b64", "stderr_b64")."""
    sandbox = _ready(sandbox)
    request = _request(ask)
    try:
        with calls.slot(user.pk):
            result = door.exec_in(sandbox, request)
    except door.SandboxGone as exc:
        raise _gone(sandbox, exc) from None
    except door.SandboxError as exc:
        raise ApplicationError(f"the sandbox could not run it: {exc}", status=502) from None
    return {
        **_output(result.stdout, ask.binary, "stdout"),
        **_output(result.stderr, ask.binary, "stderr"),
        "exit_code": result.exit_code,
        "duration_ms": round(result.duration_ms, 3),
        "timed_out": result.timed_out,
        "truncated": result.truncated,
    }


def _request(ask: ExecAsk):
    return door.exec_request(
        ask.argv,
        stdin=ask.stdin,
        env=ask.env,
        cwd=ask.cwd,
        timeout_s=ask.timeout_s,
        max_output=settings.SWITCHYARD_SANDBOX_OUTPUT_MAX_BYTES,
    )


def sandbox_exec_stream(*, user: User, sandbox: Sandbox, ask: ExecAsk) -> Iterator[dict[str, Any]]:
    """The same exec, as it runs: {"stream": "stdout"|"stderr", "data": text} chunks (with
    `binary`: "data_b64"), then the final answer without its output (`sandbox_exec`'s
    less stdout and stderr). Checked before the first chunk (the user's call slot
    included: it is held until the backend call ends); the backend call runs in a thread,
    the database is written from the caller's."""
    sandbox = _ready(sandbox)
    request = _request(ask)
    chunks: queues.Queue = queues.Queue()
    outcome: dict[str, Any] = {}
    task = sandbox.task
    calls.take(user.pk)
    slot = threading.Lock()  # given back once: by the call's end, or a stream never run
    # Who records the exec's end: the request, or, when its client went away before the
    # end, the backend call's thread (on a database connection of its own, closed after).
    handoff = threading.Lock()
    ends: dict[str, Any] = {"row": None, "done": False, "abandoned": False}

    def give() -> None:
        if slot.acquire(blocking=False):
            calls.give(user.pk)

    def record() -> None:
        door.exec_ended(ends["row"], outcome.get("result"), error=str(outcome.get("error", "")))

    def run() -> None:
        try:
            outcome["result"] = door.exec_run(
                task, request, on_output=lambda name, data: chunks.put((name, data))
            )
        except (door.SandboxGone, door.SandboxError) as exc:
            outcome["error"] = exc
        finally:
            give()
            with handoff:
                ends["done"] = True
                late = ends["abandoned"]
            if late:
                try:
                    record()
                finally:
                    db.connection.close()
            chunks.put(None)

    def events() -> Generator[dict[str, Any]]:
        try:
            ends["row"] = door.exec_started(sandbox, request)
        except BaseException:
            give()
            raise
        decoders = {
            n: codecs.getincrementaldecoder("utf-8")("replace") for n in ("stdout", "stderr")
        }
        worker = threading.Thread(target=run, name=f"exec-{sandbox.public_id}", daemon=True)
        try:
            worker.start()
        except BaseException:
            give()
            raise
        recorded = False
        try:
            while (item := chunks.get()) is not None:
                name, data = item
                if ask.binary:
                    yield {"stream": name, "data_b64": base64.b64encode(data).decode()}
                elif text := decoders[name].decode(data):
                    yield {"stream": name, "data": text}
            worker.join()
            record()
            recorded = True
        finally:
            if not recorded:  # the client went away: the end is recorded when it comes
                with handoff:
                    ends["abandoned"] = not ends["done"]
                    now = ends["done"]
                if now:
                    record()
        result = outcome.get("result")
        if result is None:
            yield {"error": f"the sandbox could not run it: {outcome.get('error')}"}
            return
        yield {
            "exit_code": result.exit_code,
            "duration_ms": round(result.duration_ms, 3),
            "timed_out": result.timed_out,
            "truncated": result.truncated,
        }

    return calls.Stream(events(), on_close=give)


def _path(path: Any) -> str:
    if not isinstance(path, str) or not path or "\0" in path or len(path) > 4096:
        raise ApplicationError("expected a path of at most 4096 characters", field="path", got=path)
    return path


def sandbox_put_file(*, user: User, sandbox: Sandbox, path: str, data: bytes) -> int:
    """Write `data` to `path` inside the sandbox (relative: in its working folder)."""
    path = _path(path)
    limit = settings.SWITCHYARD_SANDBOX_FILE_MAX_BYTES
    if len(data) > limit:
        raise ApplicationError(f"at most {limit} bytes", field="body", got=len(data), status=413)
    sandbox = _ready(sandbox)
    try:
        with calls.slot(user.pk):
            door.put_file(sandbox, path, data, mode=0o644)
    except door.SandboxGone as exc:
        raise _gone(sandbox, exc) from None
    except door.SandboxError as exc:
        raise ApplicationError(str(exc), field="path", got=path) from None
    return len(data)


def sandbox_get_file(*, user: User, sandbox: Sandbox, path: str) -> bytes:
    path = _path(path)
    sandbox = _ready(sandbox)
    try:
        with calls.slot(user.pk):
            return door.get_file(sandbox, path, limit=settings.SWITCHYARD_SANDBOX_FILE_MAX_BYTES)
    except door.SandboxGone as exc:
        raise _gone(sandbox, exc) from None
    except door.SandboxError as exc:
        raise ApplicationError(str(exc), field="path", got=path, status=404) from None


def sandbox_delete(*, user: User, sandbox: Sandbox) -> Sandbox:
    """End it now (its processes gone, its usage metered once); deleting an ended one is a
    no-op."""
    if sandbox.live:
        Sandbox.objects.filter(pk=sandbox.pk, end_reason="").update(end_reason="deleted")
        sandbox.end_reason = sandbox.end_reason or "deleted"
        door.end(sandbox.task_id, who=user.get_username(), reason="deleted")
        sandbox.task.refresh_from_db()
    return _synced(sandbox)


def sandbox_egress(*, sandbox: Sandbox, limit: int) -> list[dict[str, Any]]:
    """Its egress audit, newest first (docs/sandbox-network.md): while it is live, read from
    its backend; once ended, as kept when it ended."""
    return door.egress_requests(sandbox, limit=limit)


def task_token_scope(token: str) -> tuple[User, TaskScope] | None:
    """Who a scoped task token acts for and what it may reach, while its task runs; None
    when it is not valid (never signed here, expired, its task has ended, or its owner's
    account is switched off: the token is the owner's, as a personal token is)."""
    scope = check(token)
    if scope is None:
        return None
    task = (
        Task.objects.select_related("owner", "project")
        .filter(
            pk=scope.task_id,
            state__in=ACTIVE_STATES,
            project__slug=scope.project,
            owner__is_active=True,
        )
        .first()
    )
    if task is None:
        return None
    return task.owner, scope


def sandbox_summary(sandbox: Sandbox) -> dict[str, Any]:
    """State, age, idle time and instance-minutes so far, as the API and the page show."""
    now = timezone.now()
    end = sandbox.ended_at or now
    last = door.last_active(sandbox)
    started = sandbox.ready_at
    return {
        "id": sandbox.public_id,
        "project": sandbox.project.slug,
        "state": sandbox.state,
        "template": sandbox.template,
        "cpus": sandbox.cpus,
        "memory_mb": sandbox.memory_mb,
        "idle_timeout_s": sandbox.idle_timeout_s,
        "max_lifetime_s": sandbox.max_lifetime_s,
        "network": {"allow": list(sandbox.egress)},
        "created_at": sandbox.created_at,
        "ready_at": started,
        "ended_at": sandbox.ended_at,
        "end_reason": sandbox.end_reason,
        "age_s": round((end - sandbox.created_at).total_seconds(), 3),
        "idle_s": 0.0
        if sandbox.ended_at or getattr(sandbox, "busy", False)
        else round(max(0.0, (now - last).total_seconds()), 3),
        "instance_minutes": round((end - started).total_seconds() / 60, 4) if started else 0.0,
        "exec_count": getattr(sandbox, "execs_run", sandbox.exec_count),
        "task": sandbox.task_id,
        "created_by_task": sandbox.created_by_task_id,
        "reason": sandbox.task.reason if sandbox.live else "",
    }


__all__ = [
    "TASK_TOKEN_PREFIX",
    "TaskScope",
    "Created",
    "ExecAsk",
    "exec_ask",
    "sandbox_create",
    "sandbox_delete",
    "sandbox_egress",
    "sandbox_exec",
    "sandbox_exec_stream",
    "sandbox_get_file",
    "sandbox_put_file",
    "sandbox_refresh",
    "sandbox_summary",
    "task_token_scope",
]
