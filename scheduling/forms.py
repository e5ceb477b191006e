from __future__ import annotations

import json
import shlex
from typing import Any, cast

from django import forms

from scheduling.spec import TASK_TYPES

# The fields a newcomer needs; the rest sit under "More options" on the page.
MAIN_FIELDS = ("name", "project", "walltime", "command", "cpus", "gpus", "memory")
MORE_FIELDS = ("type", "queue", "estimate", "workdir", "inputs")


class TaskSubmitForm(forms.Form):
    """The common case as fields; anything else as a descriptor (text or file).

    Every path produces a descriptor that goes through the same validation as the API: the
    form only checks what it must to build one (numbers are numbers, the command splits).
    """

    name = forms.CharField(
        required=False,
        max_length=63,
        help_text="A short name you will recognise: lower-case letters, digits and hyphens.",
        widget=forms.TextInput(attrs={"placeholder": "md-run-7", "autocomplete": "off"}),
    )
    project = forms.ChoiceField(
        required=False, help_text="The project the run is charged to; you see its tasks."
    )
    command = forms.CharField(
        required=False,
        help_text="The program and its arguments, quoted as in a shell. No shell runs it: "
        "for pipes or $VARS write sh -c '…'.",
        widget=forms.TextInput(
            attrs={"placeholder": "python3 simulate.py --steps 1000", "autocomplete": "off"}
        ),
    )
    walltime = forms.CharField(
        required=False,
        initial="10m",
        help_text="The hard limit: the task is stopped after this long. E.g. 30m, 2h, 1d12h.",
    )
    cpus = forms.IntegerField(
        required=False, min_value=1, initial=1, label="CPUs", help_text="Cores for the whole task."
    )
    gpus = forms.IntegerField(
        required=False,
        min_value=0,
        initial=0,
        label="GPUs",
        help_text="GPUs for the whole task; 0 for none.",
    )
    memory = forms.CharField(
        required=False, initial="1Gi", help_text="Memory per node, e.g. 512Mi, 4Gi, 1Ti."
    )
    type = forms.ChoiceField(
        required=False,
        choices=[("", "let Switchyard decide")] + [(t, t) for t in TASK_TYPES],
        help_text="What kind of work it is. Left empty, it is guessed from the resources.",
    )
    queue = forms.CharField(
        required=False,
        help_text="Leave empty: a routing rule picks the queue that fits the type.",
    )
    estimate = forms.CharField(
        required=False,
        help_text="How long you expect it to run, e.g. 40h. The training queue needs it.",
    )
    workdir = forms.CharField(
        required=False,
        max_length=4096,
        label="Working folder",
        help_text="Where the job starts: a folder of your project's or your own storage, as "
        "jobs see it (pick one below). Empty: a folder of the task's own, "
        "<project folder>/tasks/<task id>.",
        widget=forms.TextInput(
            attrs={"placeholder": "/scratch/materials/run1", "autocomplete": "off"}
        ),
    )
    inputs = forms.CharField(
        required=False,
        max_length=64 * 4097,
        label="Inputs",
        help_text="Files or folders the job is given, one path per line, as jobs see them "
        "(add them from the picker below): each is linked into the working folder under its "
        "own name, e.g. ./train.py.",
        widget=forms.Textarea(
            attrs={
                "rows": 3,
                "spellcheck": "false",
                "placeholder": "/scratch/materials/code/train.py",
            }
        ),
    )
    descriptor = forms.CharField(
        required=False,
        strip=False,  # stored verbatim, as the API stores it
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        help_text="A full YAML or JSON descriptor. When given, the fields above are ignored.",
    )
    descriptor_file = forms.FileField(
        required=False,
        label="Or upload a descriptor file",
        help_text=".yaml, .yml or .json; it wins over the box and the fields.",
    )

    def __init__(self, *args: Any, projects: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["project"]).choices = [(p, p) for p in projects]

    def clean_descriptor(self) -> str:
        # Browsers send a textarea's line breaks as CRLF (HTML form encoding); the user typed
        # LF, and the parser refuses CR, so undo the encoding rather than blame the user.
        return (self.cleaned_data.get("descriptor") or "").replace("\r\n", "\n")

    def clean_inputs(self) -> list[str]:
        """One path per line; blank lines and the spaces around a path are not part of it."""
        text = self.cleaned_data.get("inputs") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def clean_command(self) -> list[str]:
        try:
            return shlex.split(self.cleaned_data.get("command") or "")
        except ValueError as exc:
            raise forms.ValidationError(f"cannot split the command: {exc}") from None

    @property
    def source(self) -> str:
        """Which input the descriptor comes from: a form field name, or "fields"."""
        if self.cleaned_data.get("descriptor_file"):
            return "descriptor_file"
        if (self.cleaned_data.get("descriptor") or "").strip():
            return "descriptor"
        return "fields"

    def descriptor_text(self) -> tuple[str | bytes, str | None]:
        """The descriptor to submit, with its format when known (None: sniff it)."""
        if self.source == "descriptor_file":
            upload = self.cleaned_data["descriptor_file"]
            fmt = "json" if (upload.name or "").lower().endswith(".json") else None
            return upload.read(), fmt
        if self.source == "descriptor":
            return self.cleaned_data["descriptor"], None
        return json.dumps(self.as_descriptor(), indent=2), "json"

    def preview_text(self) -> tuple[str | bytes, str | None, list[str]]:
        """`descriptor_text`, for the submit page's preview, and the labels of the fields still
        empty that the fields need: a stand-in fills each of them (a name, `true` as the
        command), which neither type, queue, quota nor start depend on, so the preview answers
        before the form is complete."""
        if self.source != "fields":
            return (*self.descriptor_text(), [])
        doc = self.as_descriptor()
        missing = [str(self[k].label) for k in ("name", "command") if not doc[k]]
        doc["name"] = doc["name"] or "preview"
        doc["command"] = doc["command"] or ["true"]
        return json.dumps(doc), "json", missing

    def as_descriptor(self) -> dict[str, Any]:
        """The fields as a descriptor document; empty fields are left out, not guessed."""
        data = self.cleaned_data
        doc: dict[str, Any] = {
            "apiVersion": "switchyard/v1",
            "kind": "Task",
            "name": data.get("name") or "",
            "project": data.get("project") or "",
            "resources": {},
            "command": data.get("command") or [],
        }
        for key in ("cpus", "gpus", "memory"):
            if data.get(key) not in (None, ""):
                doc["resources"][key] = data[key]
        for key in MORE_FIELDS + ("walltime",):
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
    "workdir": "workdir",
}


def field_for_error(field: str | None) -> str | None:
    """The form field a descriptor error belongs beside: `inputs[2]` is the Inputs box's."""
    if field and field.startswith("inputs[") and field.endswith("]"):
        return "inputs"
    return FIELD_FOR_ERROR.get(field or "")
