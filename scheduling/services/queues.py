"""A queue admin edits their queue (the console's queue page and `PATCH /api/v1/queues/<name>/`).

What they may change is the queue's policy, limits and weights; its name, pool and admins are a
platform admin's (the admin console). Every change is validated as the model validates it,
recorded as a configuration version with its reason, and seen by the engine within seconds.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.db import transaction

from portal import audit, roles
from portal.errors import ApplicationError, ErrorItem
from scheduling.models import Queue
from scheduling.selectors import site_view_invalidate
from scheduling.spec import TASK_TYPES

EDITABLE = (
    "policy",
    "task_types",
    "allocation",
    "max_walltime_s",
    "default_walltime_s",
    "requires_estimate",
    "preemptible",
    "cpu_oversubscription",
    "max_concurrency",
    "startup_timeout_s",
    "startup_resubmit",
    "weight_schedule",
    "wait_bound_s",
    # Live sandboxes (docs/sandboxes.md).
    "over_concurrency",
    "idle_scale_in_s",
    "egress_allow",
    "warm_pool",
)
_JSON = ("task_types", "weight_schedule", "egress_allow", "warm_pool")


class QueueForm(forms.ModelForm):
    class Meta:
        model = Queue
        fields = EDITABLE

    def clean_task_types(self) -> list:
        value = self.cleaned_data["task_types"] or []
        if not isinstance(value, list) or any(t not in TASK_TYPES for t in value):
            raise forms.ValidationError(f"a list of types from {', '.join(TASK_TYPES)}")
        return value

    def clean(self):
        cleaned = super().clean()
        default, longest = cleaned.get("default_walltime_s"), cleaned.get("max_walltime_s")
        if default and longest and default > longest:
            self.add_error("default_walltime_s", "must not exceed max_walltime_s")
        ratio = cleaned.get("cpu_oversubscription")
        if ratio is not None and ratio < 1:
            self.add_error("cpu_oversubscription", "at least 1")
        return cleaned


def queue_form_data(queue: Queue, changes: dict[str, Any]) -> dict[str, Any]:
    """The form's data: the queue as it is, with `changes` (JSON values) over it."""
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise ApplicationError(
            f"not a field a queue admin changes; one of {', '.join(EDITABLE)}",
            field=unknown[0],
            got=unknown[0],
        )
    data: dict[str, Any] = {}
    for name in EDITABLE:
        value = changes[name] if name in changes else getattr(queue, name)
        if name in _JSON:
            data[name] = json.dumps(value)
        elif isinstance(value, bool):
            data[name] = "on" if value else ""
        else:
            data[name] = "" if value is None else value
    return data


@transaction.atomic
def queue_update(*, user: User, queue: Queue, data: dict[str, Any], reason: str) -> Queue:
    """Apply a form's worth of fields (strings, as a page posts them) to the queue."""
    if not roles.administers_queue(user, queue.pk):
        raise ApplicationError("no such queue", status=404)
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError("say why you change the queue", field="reason")
    instance = Queue.objects.select_for_update().get(pk=queue.pk)
    before = {name: getattr(instance, name) for name in EDITABLE}
    form = QueueForm(data, instance=instance)
    if not form.is_valid():
        errors = [
            ErrorItem(field=name, message=" ".join(messages), got=data.get(name))  # type: ignore[arg-type]  # a bound form's ErrorList holds message strings
            for name, messages in form.errors.items()
        ]
        raise ApplicationError("invalid queue settings", errors=errors)
    # By value, not as the form compares: a JSON field's text never equals its list.
    if all(form.cleaned_data[name] == before[name] for name in EDITABLE):
        raise ApplicationError("nothing changed", field=None)
    with audit.because(reason):
        saved = form.save()
    transaction.on_commit(site_view_invalidate)
    return saved
