"""A queue admin's page for their queue: change its rules, with a reason."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from scheduling.forms_admin import QueueEditForm
from scheduling.selectors.queues import queue_by_name
from scheduling.services.queues import queue_form_data, queue_update


def _queue(request: SignedInRequest, name: str):
    queue = queue_by_name(name)
    if queue is None or not roles.administers_queue(request.user, queue.pk):
        raise Http404("no such queue")
    return queue


@login_required
def queue_edit(request: SignedInRequest, name: str) -> HttpResponse:
    queue = _queue(request, name)
    posted = request.method == "POST"
    form = QueueEditForm.for_queue(queue, request.POST if posted else None)
    reason = request.POST.get("reason", "") if posted else ""
    context = {"queue": queue, "form": form, "reason": reason}
    if not posted or "add_row" in request.POST:  # another empty window row, nothing saved
        return render(request, "scheduling/queue_edit.html", context)
    if form.is_valid():
        try:
            queue_update(
                user=request.user,
                queue=queue,
                data=queue_form_data(queue, form.changes()),
                reason=reason,
            )
        except ApplicationError as exc:
            context["page_errors"] = _place_errors(form, exc)
        else:
            messages.success(
                request, f"Queue {queue.name} changed; the engine sees it within seconds."
            )
            return redirect("queue-list")
    context["not_saved"] = True
    return render(request, "scheduling/queue_edit.html", context, status=400)


def _place_errors(form: QueueEditForm, exc: ApplicationError) -> list[str]:
    """Each error beside its field, once; what belongs to no field (the reason, "nothing
    changed") is returned for the banner."""
    rest = []
    for item in exc.errors:
        name, message = item.field, item.message
        if name == "weight_schedule" and message.startswith("weight_schedule["):
            name, _, message = message.partition(": ")  # the model names the row's field
        field = form.field_for(name)
        if field is not None and field not in form.errors:
            form.add_error(field, message)
        elif field is None:
            rest.append(f"{'Why' if name == 'reason' else 'Queue'}: {message}")
    return rest
