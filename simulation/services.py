"""What-if runs from the console: start one (checked, stored, announced on commit) and run it
(a worker's part, one run at a time; simulation/tasks.py holds the lock). docs/simulation.md.

Every field the page offers either does what it says for the chosen workload or is refused
with the field, what was expected and what came: a seed given to a trace replay would be
silently ignored by the simulator, so it is refused here instead.

A history replay reads the portal's own tasks, so it is scoped like them: it replays the
queues stored in its parameters (`queues`), which a queue admin may only choose among their
own (none chosen: all of theirs); only a platform admin replays the whole site (no `queues`).
Who then sees a run follows from what it read: simulation/selectors.py.
"""

from __future__ import annotations

import logging
import math
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousFileOperation
from django.core.files.uploadedfile import UploadedFile
from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.text import get_valid_filename

from portal import roles
from portal.errors import ApplicationError, ErrorItem
from scheduling import usage
from simulation.models import SimulationRun
from simulation.replay import history_workload
from simulation.selectors import replayable_queues
from simulation.simulator.model import POLICIES
from simulation.simulator.runner import WorkloadError, compare, run_named
from simulation.simulator.traces import TraceError

log = logging.getLogger(__name__)

Workload = SimulationRun.Workload
State = SimulationRun.State
MAX_DAYS = 3650  # ten years; far larger and the window would start before year 1 (an error)
MAX_REPEAT = 100
# The workloads that read each optional field; given for another workload, it is refused.
READ_BY = {
    "seed": (Workload.DAY, Workload.BURST),
    "days": (Workload.HISTORY,),
    "limit": (Workload.SWF,),
    "repeat": (Workload.SWF,),
    "file": (Workload.SWF,),
    "queues": (Workload.HISTORY,),
}
# The Celery task that runs the queued runs (simulation/tasks.py); a start wakes it once the
# transaction commits, and the beat sends it every minute too: a lost message only delays a run.
RUN_QUEUED = "simulation.run_queued"
ORPHANED = "stopped: the worker running it went away (restarted, or out of memory); start it again"


def simulation_start(
    *,
    user: User,
    workload: str,
    policies: list[str],
    seed: object = None,
    days: object = None,
    limit: object = None,
    repeat: object = None,
    upload: UploadedFile | None = None,
    queues: list[str] | None = None,
) -> SimulationRun:
    """Check the request, keep the uploaded trace, store the run queued; a worker is woken
    once the transaction commits. Nothing is stored when anything is refused."""
    if not roles.is_operator(user):
        raise ApplicationError("only platform admins and queue admins run simulations", status=403)
    parameters = _parameters(
        workload, policies, upload=upload, seed=seed, days=days, limit=limit, repeat=repeat
    )
    scope = _scope(user, workload, list(queues or []))
    if scope:
        parameters["queues"] = scope
    # The trace is written before the transaction: on SQLite it holds the write lock from its
    # start (IMMEDIATE), and a large upload would make every other writer wait.
    stored = _keep(upload) if upload is not None else ""
    try:
        with transaction.atomic():
            run = SimulationRun.objects.create(
                workload=workload, parameters=parameters, upload=stored, created_by=user
            )
            usage.after_commit(RUN_QUEUED, (), what="the queued simulations")
    except Exception:
        if stored:
            shutil.rmtree(Path(settings.SWITCHYARD_SIMULATION_DIR) / Path(stored).parent)
        raise
    return run


def simulation_fail_orphans() -> int:
    """Runs left running by a worker that went away. Only the lock's holder runs simulations,
    so a run found running by the holder has nobody left working on it."""
    ended = 0
    for run in SimulationRun.objects.filter(state=State.RUNNING):
        ended += _move(run, State.FAILED, error=ORPHANED, finished_at=timezone.now())
    return ended


def simulation_run(run_id: int) -> SimulationRun:
    """Run a queued run to its end: the result, or the error, is stored either way."""
    run = SimulationRun.objects.get(pk=run_id)
    if not _move(run, State.RUNNING, started_at=timezone.now(), progress=0):
        return run  # taken or ended already: a message delivered twice
    try:
        result = _plain(_execute(run, _Progress(run)))
    except (WorkloadError, TraceError, OSError) as exc:
        error = str(exc)
    except UnicodeDecodeError as exc:  # an upload that is no text at all
        error = (
            f"{run.upload_name or 'the trace'}: not a text file (byte {exc.start}: {exc.reason})"
        )
    except Exception as exc:  # noqa: BLE001 - a bug fails the run, never leaves it running
        log.exception("simulation #%s failed", run.pk)
        error = f"internal error: {type(exc).__name__}: {exc}"
    else:
        try:
            _move(run, State.SUCCEEDED, result=result, progress=100, finished_at=timezone.now())
            return run
        except DatabaseError as exc:
            log.exception("simulation #%s: its result could not be stored", run.pk)
            error = f"the result could not be stored: {exc}"
    _move(run, State.FAILED, error=error, finished_at=timezone.now())
    return run


class _Progress:
    """The simulator's `progress(done, total)`: the run's percent is saved when it moves a
    whole point, so at most 100 writes a run; 100 is written with the result."""

    def __init__(self, run: SimulationRun) -> None:
        self.run = run

    def __call__(self, done: int, total: int) -> None:
        percent = min(99, 100 * done // max(total, 1))
        if percent > self.run.progress:
            self.run.progress = percent
            try:
                self.run.save(update_fields=["progress"])
            except DatabaseError:  # a busy database costs the bar a step, not the run
                log.warning("simulation #%s: progress not saved", self.run.pk, exc_info=True)


def _execute(run: SimulationRun, progress: _Progress) -> dict[str, Any]:
    p = run.parameters
    if run.workload == Workload.HISTORY:
        # The window the operator asked for: up to when they asked, not to when a worker ran.
        jobs, site, left_out = history_workload(
            p["days"], now=run.created_at, queues=p.get("queues")
        )
        result = compare(jobs, site, p["policies"], progress=progress)
        result.update(workload="history", days=p["days"], left_out=left_out)
        return result
    return run_named(
        run.workload,
        seed=p.get("seed", 1),
        policies=p["policies"],
        swf=str(run.upload_path) if run.upload else None,
        limit=p.get("limit"),
        repeat=p.get("repeat", 1),
        progress=progress,
    )


def _move(run: SimulationRun, to: str, **fields: Any) -> bool:
    """The one way a run changes state: allowed by `MOVES`, and only from the state it was
    read in (compare-and-set)."""
    if to not in SimulationRun.MOVES.get(run.state, ()):
        return False
    moved = SimulationRun.objects.filter(pk=run.pk, state=run.state).update(state=to, **fields)
    if moved:
        run.state = to
        for name, value in fields.items():
            setattr(run, name, value)
    return bool(moved)


def _plain(value: Any) -> Any:
    """The result as every database's JSON takes it: NaN and infinities (no job ran, nothing
    to divide by) become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# -- checking a request ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Number:
    kind: type
    expected: str
    default: int | float | None
    fits: Callable[[Any], bool]  # NaN and infinities fit no bound, so they are refused too


NUMBERS = {
    "seed": _Number(int, "a whole number", 1, lambda v: True),
    "days": _Number(
        float, f"a number of days above 0, at most {MAX_DAYS}", 7.0, lambda v: 0 < v <= MAX_DAYS
    ),
    "limit": _Number(int, "a whole number of jobs, at least 1", None, lambda v: v >= 1),
    "repeat": _Number(
        int, f"a whole number from 1 to {MAX_REPEAT}", 1, lambda v: 1 <= v <= MAX_REPEAT
    ),
}


def _given(raw: object) -> bool:
    return raw is not None and str(raw).strip() != ""


def _parameters(
    workload: str, policies: list[str], *, upload: UploadedFile | None, **numbers: object
) -> dict[str, Any]:
    """What the run is asked, checked: every mistake at once, each with its field."""
    if workload not in Workload.values:
        expected = f"expected one of {', '.join(Workload.values)}"
        raise ApplicationError(expected, field="workload", got=workload)
    errors: list[ErrorItem] = []
    chosen = [p for p in POLICIES if p in policies]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown or not chosen:
        expected = f"expected some of {', '.join(POLICIES)}"
        errors.append(ErrorItem("policies", expected, unknown or list(policies)))
    elif workload == Workload.DAY and chosen != list(POLICIES):
        expected = f"validation-day measures its criteria under all of {', '.join(POLICIES)}: tick all three"
        errors.append(ErrorItem("policies", expected, chosen))
    parameters: dict[str, Any] = {"policies": chosen}
    for field, raw in numbers.items():
        if workload not in READ_BY[field]:
            if _given(raw):
                errors.append(_not_read(field, workload, raw))
            continue
        spec = NUMBERS[field]
        try:
            value = spec.kind(str(raw).strip()) if _given(raw) else spec.default
        except (ValueError, OverflowError):
            value = None
        if _given(raw) and (value is None or not spec.fits(value)):
            errors.append(ErrorItem(field, f"expected {spec.expected}", raw))
        elif value is not None:
            parameters[field] = value
    if workload in READ_BY["file"]:
        errors.extend(_upload_errors(upload))
    elif upload is not None:
        errors.append(_not_read("file", workload, upload.name))
    if errors:
        raise ApplicationError("invalid simulation", errors=errors)
    return parameters


def _scope(user: User, workload: str, asked: list[str]) -> list[str]:
    """The queues a history replay reads, sorted; empty for the whole site (a platform
    admin's choice alone) and for the workloads that read no portal data."""
    if workload not in READ_BY["queues"]:
        if asked:
            errors = [_not_read("queues", workload, asked)]
            raise ApplicationError("invalid simulation", errors=errors)
        return []
    allowed = replayable_queues(user)
    if not asked and not roles.is_platform_admin(user):
        return allowed  # a queue admin's replay: their own queues
    unknown = sorted(set(asked) - set(allowed))
    if unknown:
        expected = (
            "queue names"
            if roles.is_platform_admin(user)
            else f"some of your queues ({', '.join(allowed)}): a replay of other queues "
            "or of the whole site is a platform admin's"
        )
        errors = [ErrorItem("queues", f"expected {expected}", unknown)]
        raise ApplicationError("invalid simulation", errors=errors)
    return sorted(set(asked))


def _not_read(field: str, workload: str, got: object) -> ErrorItem:
    readers = READ_BY[field]
    verb = "reads" if len(readers) == 1 else "read"
    message = f"only {' and '.join(readers)} {verb} it: leave it empty for {workload}"
    return ErrorItem(field, message, got)


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):,.1f} MB"


def _upload_errors(upload: UploadedFile | None) -> list[ErrorItem]:
    most = settings.SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES
    if upload is None:
        return [
            ErrorItem(
                "file",
                "swf replays a trace: expected a Standard Workload Format file to upload",
                None,
            )
        ]
    size = cast(int, upload.size)  # an upload the request parsed knows its size
    if size > most:
        return [
            ErrorItem(
                "file",
                f"expected a trace of at most {_megabytes(most)}",
                f"{upload.name}, {_megabytes(size)}",
            )
        ]
    if not upload.size:
        return [ErrorItem("file", "expected a trace with jobs in it", f"{upload.name}, empty")]
    return []


def _keep(upload: UploadedFile) -> str:
    """The trace, written under SWITCHYARD_SIMULATION_DIR in a folder of its own and under the
    name it was uploaded with (so that the simulator's errors name the file the operator
    knows); its path below that folder."""
    try:
        name = get_valid_filename(Path(upload.name or "").name)
    except SuspiciousFileOperation:
        name = "trace.swf"
    folder = Path(settings.SWITCHYARD_SIMULATION_DIR) / uuid.uuid4().hex
    try:
        folder.mkdir(parents=True)
        with open(folder / name, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise ApplicationError(
            f"the trace could not be kept: {exc.strerror or exc}", field="file", status=503
        ) from None
    return f"{folder.name}/{name}"
