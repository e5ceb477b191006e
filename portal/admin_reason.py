"""A reason for every change made in the admin console to a versioned model (docs/console.md,
"Configuration history").

The console pages and the API ask for a reason; so does the admin console, on the change form
(add and change, inlines included), on the delete confirmation and beside the list's *Save*
when a list has editable columns. The reason is recorded exactly as a page's: the writes run
inside `audit.because(reason)`, and the history's model signals store it with each version.
*Delete selected* is not offered for these models: each is deleted on its own page, where the
reason is asked.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse

from portal import audit

REASON = "change_reason"
REASON_LABEL = "Reason for this change"
REASON_HELP = "Kept with the change in the configuration history (History in the console)."
REASON_MAX = 500


class ReasonForm(forms.ModelForm):
    """The model's own form, and the reason the change is made."""

    change_reason = forms.CharField(
        label=REASON_LABEL,
        help_text=REASON_HELP,
        max_length=REASON_MAX,
        strip=True,
        widget=forms.TextInput(attrs={"size": 60}),
        error_messages={"required": "Say why you make this change: it is kept in the history."},
    )


def reason_from(data: Any) -> tuple[str, str | None]:
    """The reason in a POST, and what is wrong with it (None when it is fine)."""
    reason = str(data.get(REASON, "")).strip()
    if not reason:
        return "", "Say why you make this change: it is kept in the history."
    if len(reason) > REASON_MAX:
        return "", f"At most {REASON_MAX} characters (got {len(reason)})."
    return reason, None


class VersionedAdmin(admin.ModelAdmin):
    """The admin of a model whose changes are versions (portal/history.py `TRACKED`)."""

    form = ReasonForm
    delete_confirmation_template = "admin/versioned_delete_confirmation.html"
    change_list_template = "admin/versioned_change_list.html"

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        with audit.because(self._reason(request, form)):
            super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # Many-to-many fields and inlines (a pool's nodes, a project's quotas) are saved here.
        with audit.because(self._reason(request, form)):
            super().save_related(request, form, formsets, change)

    def _reason(self, request: HttpRequest, form: Any) -> str:
        cleaned = getattr(form, "cleaned_data", None) or {}
        if cleaned.get(REASON):
            return cleaned[REASON]
        reason, _ = reason_from(request.POST)  # a list's editable columns: checked before
        return reason

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # it would delete with no reason
        return actions

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict | None = None
    ) -> HttpResponse:
        # Django's view deletes on any non-empty POST, whatever its fields: each needs a reason.
        if request.method != "POST" or not request.POST:
            return super().delete_view(request, object_id, extra_context)
        reason, error = reason_from(request.POST)
        if error is not None:
            # The confirmation again, with the error under the reason; nothing is deleted.
            request.POST = QueryDict()
            context = {**(extra_context or {}), "reason_error": error}
            return super().delete_view(request, object_id, context)
        with audit.because(reason):
            return super().delete_view(request, object_id, extra_context)

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> Any:
        if request.method == "POST" and "_save" in request.POST and self.list_editable:
            reason, error = reason_from(request.POST)
            if error is not None:
                messages.error(request, f"{REASON_LABEL}: {error} Nothing was saved.")
                return HttpResponseRedirect(request.get_full_path())
            with audit.because(reason):
                return super().changelist_view(request, extra_context)
        response = super().changelist_view(request, extra_context)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            response.context_data["reason_label"] = REASON_LABEL
        return response
