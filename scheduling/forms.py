from __future__ import annotations

import shlex
from typing import Any

from django import forms

from scheduling.spec import TASK_TYPES


class TaskSubmitForm(forms.Form):
    """The common case as fields; anything else as a descriptor (text or file).

    Both paths produce a descriptor that goes through the same validation as the API.
    """

    name = forms.CharField(required=False, max_length=63, help_text="lower-case letters, digits, -")
    project = forms.ChoiceField(required=False)
    type = forms.ChoiceField(
        required=False,
        choices=[("", "let Switchyard decide")] + [(t, t) for t in TASK_TYPES],
    )
    queue = forms.CharField(required=False, help_text="leave empty to route by rule")
    command = forms.CharField(
        required=False,
        help_text="program and arguments, split like a shell would (no shell runs it)",
        widget=forms.TextInput(attrs={"placeholder": "python3 -c 'print(42)'"}),
    )
    cpus = forms.IntegerField(required=False, min_value=1, initial=1)
    gpus = forms.IntegerField(required=False, min_value=0, initial=0)
    memory = forms.CharField(required=False, initial="1Gi", help_text="per node, e.g. 4Gi")
    walltime = forms.CharField(required=False, initial="10m", help_text="e.g. 30m, 2h, 1d12h")
    estimate = forms.CharField(required=False, help_text="expected run time (training needs it)")
    descriptor = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 12, "spellcheck": "false"}),
        help_text="a full YAML or JSON descriptor; overrides the fields above",
    )
    descriptor_file = forms.FileField(required=False, label="or upload a descriptor file")

    def __init__(self, *args: Any, projects: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [(p, p) for p in projects]

    def descriptor_source(self) -> tuple[str | bytes, str | None] | None:
        """The descriptor given as text or file, if any, with its format when known."""
        upload = self.cleaned_data.get("descriptor_file")
        if upload:
            name = (upload.name or "").lower()
            fmt = "json" if name.endswith(".json") else None
            return upload.read(), fmt
        text = self.cleaned_data.get("descriptor") or ""
        return (text, None) if text.strip() else None

    def as_descriptor(self) -> dict[str, Any]:
        """The fields as a descriptor document; empty fields are left out, not guessed."""
        data = self.cleaned_data
        try:
            command = shlex.split(data.get("command") or "")
        except ValueError as exc:
            self.add_error("command", f"cannot split the command: {exc}")
            command = []
        doc: dict[str, Any] = {
            "apiVersion": "switchyard/v1",
            "kind": "Task",
            "name": data.get("name") or "",
            "project": data.get("project") or "",
            "resources": {},
            "command": command,
        }
        for key in ("cpus", "gpus", "memory"):
            if data.get(key) not in (None, ""):
                doc["resources"][key] = data[key]
        for key in ("type", "queue", "walltime", "estimate"):
            if data.get(key):
                doc[key] = data[key]
        return doc


# Where descriptor errors show on the form when the fields were used.
FIELD_FOR_ERROR = {
    "name": "name",
    "project": "project",
    "type": "type",
    "queue": "queue",
    "command": "command",
    "resources.cpus": "cpus",
    "resources.gpus": "gpus",
    "resources.memory": "memory",
    "walltime": "walltime",
    "estimate": "estimate",
}
