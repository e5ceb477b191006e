"""Writes on allocations: a lead asks for more, a platform admin decides (docs/accounting.md).

Mirrors the priority requests (scheduling/services/priority.py): one pending request per
project (a database constraint), no one approves their own, every step is in the audit log,
the admins are mailed when a request comes and the lead when it is decided. An approval
changes the allocation itself, which is configuration: a version in the history, with the
decision as its reason (docs/console.md). Work held for the allocation starts at the next
policy pass, which the approval asks for at once.
"""

from __future__ import annotations

from datetime import date

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounting import allocations as pure
from accounting.allocation_selectors import today, view_of
from accounting.models import Allocation, AllocationRequest
from portal import audit, roles
from portal.errors import ApplicationError
from portal.models import Project
from portal.notify import notify
from portal.selectors import project_get_visible
from scheduling.usage import after_commit, site_view_invalidate

R = AllocationRequest.State
MAX_TEXT = 2000
MOST_HOURS = 10**9
# What an allocation's column holds (a PositiveIntegerField on every database).
MOST_GRANTED = 2_147_483_647


def _hours(value: object, field: str) -> int:
    """A whole number of hours, 0 or more (a form's digits or the API's integer)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if value in (None, ""):
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MOST_HOURS:
        raise ApplicationError(
            f"a whole number of hours, 0 to {MOST_HOURS}", field=field, got=str(value)[:80]
        )
    return value


def _day(value: object, field: str) -> date | None:
    if value in (None, ""):
        return None
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value).strip())
    except ValueError:
        raise ApplicationError("a day as YYYY-MM-DD", field=field, got=str(value)[:80]) from None


def _current(project_id: int, day: date, *, lock: bool = False) -> Allocation | None:
    rows = Allocation.objects.filter(project_id=project_id)
    found = list(rows.select_for_update() if lock else rows)
    chosen = pure.current([view_of(a) for a in found], day)
    return next((a for a in found if chosen and view_of(a) == chosen), None)


def allocation_request_create(
    *,
    user: User,
    project: str,
    justification: str,
    gpu_hours: object = 0,
    core_hours: object = 0,
    ends: object = None,
) -> AllocationRequest:
    """A lead asks for `gpu_hours` and `core_hours` more (and the end moved to `ends`); with
    no current allocation, for a new one from the day it is approved until `ends`."""
    the_project = project_get_visible(user, project)
    if the_project is None:
        raise ApplicationError("you are not a member of this project", field="project", got=project)
    if not roles.leads_project(user, the_project):
        raise ApplicationError(
            "only the project's lead asks for more allocation",
            field="project",
            got=project,
            status=403,
        )
    gpus, cores = _hours(gpu_hours, "gpu_hours"), _hours(core_hours, "core_hours")
    last = _day(ends, "ends")
    day = today(timezone.now())
    if last is not None and last < day:
        raise ApplicationError(
            f"today ({day:%Y-%m-%d}) or later", field="ends", got=last.isoformat()
        )
    renewal = _current(the_project.pk, day) is None
    if renewal and last is None:
        raise ApplicationError(
            "the project has no current allocation: say until when the new one runs",
            field="ends",
        )
    if not gpus and not cores and (renewal or last is None):
        raise ApplicationError(
            "ask for some GPU-hours or core-hours (or a later end)", field="gpu_hours", got=0
        )
    if not isinstance(justification, str):
        raise ApplicationError("text", field="justification", got=str(justification)[:80])
    text = justification.strip()
    if not text:
        raise ApplicationError("say what the work needs it for", field="justification")
    if len(text) > MAX_TEXT:
        raise ApplicationError(
            f"at most {MAX_TEXT} characters", field="justification", got=len(text)
        )
    try:
        with transaction.atomic():
            made = AllocationRequest.objects.create(
                requester=user,
                project=the_project,
                gpu_hours=gpus,
                core_hours=cores,
                ends=last,
                justification=text,
            )
            audit.record(
                audit.Action.ALLOCATION_REQUEST,
                actor=user,
                target=f"allocation request #{made.pk}",
                project=the_project.slug,
                detail={
                    "gpu_hours": gpus,
                    "core_hours": cores,
                    "ends": str(last or ""),
                    "justification": text,
                },
            )
    except IntegrityError:
        earlier = AllocationRequest.objects.filter(project=the_project, state=R.PENDING).first()
        raise ApplicationError(
            f"request #{earlier.pk if earlier else '?'} of this project is still pending",
            field="project",
            got=project,
            status=409,
        ) from None
    for admin in User.objects.filter(is_superuser=True, is_active=True).exclude(pk=user.pk):
        notify(
            admin,
            f"allocation request #{made.pk} to decide",
            f"{user.get_username()} asks for {asked(made)} for project {the_project.slug}: {text}",
        )
    return made


def allocation_grant(
    *,
    by: User,
    project: object,
    name: object,
    starts: object,
    ends: object,
    reason: object,
    gpu_hours: object = None,
    core_hours: object = None,
) -> Allocation:
    """A platform admin grants a project an allocation directly (a resource left None is
    not limited by it). A version in the history, with `reason`, like any configuration."""
    if not roles.is_platform_admin(by):
        raise ApplicationError("only a platform admin grants allocations", status=403)
    the_project = Project.objects.filter(slug=project).first() if isinstance(project, str) else None
    if the_project is None:
        raise ApplicationError("no such project", field="project", got=str(project)[:80])
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > 100:
        raise ApplicationError("a name of 1 to 100 characters", field="name", got=str(name)[:80])
    first, last = _day(starts, "starts"), _day(ends, "ends")
    if first is None or last is None:
        raise ApplicationError("a day as YYYY-MM-DD", field="starts" if first is None else "ends")
    if last < first:
        raise ApplicationError(
            f"on or after the day it starts ({first:%Y-%m-%d})", field="ends", got=last.isoformat()
        )
    if not isinstance(reason, str) or not reason.strip():
        raise ApplicationError("say why: it is kept in the history", field="reason")
    budgets = {
        field: None if value in (None, "") else _hours(value, field)
        for field, value in (("gpu_hours", gpu_hours), ("core_hours", core_hours))
    }
    if Allocation.objects.filter(project=the_project, name=name.strip()).exists():
        raise ApplicationError(
            "the project has an allocation of this name", field="name", got=name, status=409
        )
    with audit.because(reason.strip()[:MAX_TEXT]):
        made = Allocation.objects.create(
            project=the_project, name=name.strip(), starts=first, ends=last, **budgets
        )
    # The site's policy names the projects with an allocation: this process's copy now, the
    # others' within its cache time.
    transaction.on_commit(site_view_invalidate)
    after_commit("scheduling.policy_pass", (), what="release of work held for an allocation")
    return made


def asked(request: AllocationRequest) -> str:
    """`500 GPU-hours, 1000 core-hours more, until 2027-06-30`."""
    parts = [
        f"{n} {unit}"
        for n, unit in ((request.gpu_hours, "GPU-hours"), (request.core_hours, "core-hours"))
        if n
    ]
    text = (", ".join(parts) + " more") if parts else "a later end"
    return text + (f", until {request.ends:%Y-%m-%d}" if request.ends else "")


def allocation_request_decide(
    *, user: User, request: AllocationRequest, approve: bool, comment: str = ""
) -> AllocationRequest:
    """Approve (the allocation grows, or a new one starts today) or reject, with a comment."""
    if not roles.is_platform_admin(user):
        raise ApplicationError("only a platform admin decides allocation requests", status=403)
    if approve and request.requester_id == user.pk:
        raise ApplicationError(
            "you asked for this: another platform admin approves it (you may reject it to "
            "withdraw it)",
            field="requester",
            got=user.get_username(),
            status=403,
        )
    if request.state != R.PENDING:
        raise ApplicationError(
            f"the request is already {request.state}",
            field="state",
            got=request.state,
            status=409,
        )
    now = timezone.now()
    comment = (comment or "").strip()[:MAX_TEXT]
    to = R.APPROVED if approve else R.REJECTED
    with transaction.atomic():
        if not AllocationRequest.objects.filter(pk=request.pk, state=R.PENDING).update(
            state=to, decided_by=user, decided_at=now, comment=comment
        ):
            raise ApplicationError("the request was decided meanwhile", status=409)
        request.refresh_from_db()
        if approve:
            why = f"allocation request #{request.pk} approved" + (f": {comment}" if comment else "")
            with audit.because(why):
                granted = _grant(request, today(now))
            AllocationRequest.objects.filter(pk=request.pk).update(allocation=granted)
            request.allocation = granted
        audit.record(
            audit.Action.ALLOCATION_APPROVE if approve else audit.Action.ALLOCATION_REJECT,
            actor=user,
            target=f"allocation request #{request.pk}",
            project=request.project.slug,
            detail={
                "asked": asked(request),
                "comment": comment,
                "allocation": str(request.allocation) if approve else None,
            },
        )
    if approve:
        transaction.on_commit(site_view_invalidate)  # a first allocation, for a renewal
        # Work held for the allocation need not wait for the next periodic pass.
        after_commit("scheduling.policy_pass", (), what="release of work held for an allocation")
    notify(
        request.requester,
        f"allocation request #{request.pk} {to}",
        f"Your request #{request.pk} for {asked(request)} for project {request.project.slug} "
        f"was {to} by {user.get_username()}."
        + (f"\n\n{comment}" if comment else "")
        + (f"\n\nThe allocation is now {_budget_text(request.allocation)}." if approve else ""),
    )
    return request


def _grant(request: AllocationRequest, day: date) -> Allocation:
    """What an approval changes: the current allocation grows, or a new one starts `day`."""
    # Locked: an edit in the admin console at the same moment would lose these hours.
    current = _current(request.project_id, day, lock=True)
    if current is None:
        assert request.ends is not None  # a renewal names its end (allocation_request_create)
        return Allocation.objects.create(
            project_id=request.project_id,
            name=_fresh_name(request, day),
            starts=day,
            ends=max(request.ends, day),
            gpu_hours=request.gpu_hours or None,
            core_hours=request.core_hours or None,
        )
    # A resource the allocation does not limit stays unlimited: more of it changes nothing.
    if current.gpu_hours is not None:
        current.gpu_hours = _more(current.gpu_hours, request.gpu_hours, "gpu_hours")
    if current.core_hours is not None:
        current.core_hours = _more(current.core_hours, request.core_hours, "core_hours")
    if request.ends is not None and request.ends > current.ends:
        current.ends = request.ends
    current.save(update_fields=["gpu_hours", "core_hours", "ends"])
    return current


def _more(granted: int, more: int, field: str) -> int:
    if granted + more > MOST_GRANTED:
        raise ApplicationError(
            f"the allocation would hold more than {MOST_GRANTED} hours",
            field=field,
            got=granted + more,
            status=409,
        )
    return granted + more


def _fresh_name(request: AllocationRequest, day: date) -> str:
    base = f"{request.project.slug} from {day:%Y-%m-%d}"
    taken = set(
        Allocation.objects.filter(project_id=request.project_id).values_list("name", flat=True)
    )
    name, n = base, 2
    while name in taken:
        name, n = f"{base} ({n})", n + 1
    return name


def _budget_text(allocation: Allocation | None) -> str:
    if allocation is None:
        return "unchanged"
    parts = [
        f"{n} {unit}"
        for n, unit in ((allocation.gpu_hours, "GPU-hours"), (allocation.core_hours, "core-hours"))
        if n is not None
    ]
    return f"'{allocation.name}', {', '.join(parts) or 'no budget limit'} until {allocation.ends:%Y-%m-%d}"
