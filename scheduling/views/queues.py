"""A queue admin's page for their queue: change its rules, with a reason."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from scheduling.selectors.queues import queue_by_name
from scheduling.services.queues import QueueForm, queue_update


def _queue(request: SignedInRequest, name: str):
    queue = queue_by_name(name)
    if queue is None or not roles.administers_queue(request.user, queue.pk):
        raise Http404("no such queue")
    return queue


@login_required
def queue_edit(request: SignedInRequest, name: str) -> HttpResponse:
    queue = _queue(request, name)
    form = QueueForm(instance=queue)
    reason = ""
    if request.method == "POST":
        reason = request.POST.get("reason", "")
        form = QueueForm(request.POST, instance=queue)
        try:
            queue_update(user=request.user, queue=queue, data=request.POST, reason=reason)
        except ApplicationError as exc:
            for item in exc.errors:
                if item.field in form.fields:
                    form.add_error(item.field, item.message)
                else:
                    messages.error(request, f"{item.field or 'queue'}: {item.message}")
        else:
            messages.success(
                request, f"Queue {queue.name} changed; the engine sees it within seconds."
            )
            return redirect("queue-list")
    context = {"queue": queue, "form": form, "reason": reason}
    return render(request, "scheduling/queue_edit.html", context)
