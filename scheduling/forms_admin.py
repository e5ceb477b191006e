"""The admins' forms in the user's words: a queue's rules and the nightly lease schedules.

Durations are typed as on the submit form (72h, 30m, 90s), kinds of work are checkboxes and a
weight schedule is rows of from/to/weights. The forms only turn what was typed into the values
the services take; the services validate them as the API's changes are (docs/console.md).
"""

from __future__ import annotations

import re
from typing import Any

from django import forms

from scheduling.decisions.humanize import format_duration
from scheduling.descriptor.fields import parse_duration
from scheduling.models import LeaseSchedule, Pool, Queue
from scheduling.spec import TASK_TYPES

# Empty rows offered below a schedule's windows, so a new one is added without JavaScript.
EMPTY_ROWS = 2
MAX_ROWS = 24
_TIME = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])")


def duration_text(seconds: int | None) -> str:
    """`259200` → `72h`, `5400` → `1h30m`: what `parse_duration` reads back."""
    return format_duration(seconds).replace("min", "m") if seconds else ""


class DurationField(forms.CharField):
    """A duration typed as 72h, 30m, 90s or 1h30m; seconds once cleaned, None when empty."""

    def prepare_value(self, value: Any) -> Any:
        return duration_text(value) if isinstance(value, int) else value

    def to_python(self, value: Any) -> int | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            return parse_duration(text)
        except ValueError as exc:
            raise forms.ValidationError(f"{exc}; got {text[:40]!r}") from None


class QueueEditForm(forms.Form):
    policy = forms.ChoiceField(choices=Queue.Policy.choices, label="Order of waiting work")
    task_types = forms.MultipleChoiceField(
        choices=[(t, t) for t in TASK_TYPES],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        label="Kinds of work it takes",
        help_text="None ticked: every kind.",
    )
    allocation = forms.ChoiceField(choices=Queue.Allocation.choices, label="Placing tasks")
    max_walltime = DurationField(
        required=False,
        label="Longest run",
        help_text="A task asking for longer is refused. E.g. 72h, 30m, 90s; empty: no limit.",
    )
    default_walltime = DurationField(
        required=False,
        label="Run limit when a task names none",
        help_text="E.g. 1h; empty: the longest run.",
    )
    requires_estimate = forms.BooleanField(
        required=False, label="Tasks must say how long they expect to run"
    )
    preemptible = forms.BooleanField(
        required=False, label="Its running tasks may be stopped for a lender's work"
    )
    cpu_oversubscription = forms.IntegerField(
        min_value=1,
        label="Tasks sharing one core",
        help_text="1: every task has its cores to itself.",
    )
    max_concurrency = forms.IntegerField(
        required=False, min_value=0, label="Running at most", help_text="Empty: no limit."
    )
    startup_timeout = DurationField(
        required=False,
        label="Alert when a task sent to its nodes has not started after",
        help_text="E.g. 10m; empty: never.",
    )
    startup_resubmit = forms.BooleanField(required=False, label="… and submit it again")
    wait_bound = DurationField(
        required=False,
        label="A task waiting longer than this goes first, and nothing passes it",
        help_text="E.g. 2h; empty: no bound (levels and quotas decide the order).",
    )
    over_concurrency = forms.ChoiceField(
        choices=[("queue", "waits for a free place"), ("refuse", "is refused, saying why")],
        label="A live sandbox asked for while the most are running",
    )
    idle_scale_in = DurationField(
        required=False,
        label="Live sandboxes end after being idle for",
        help_text="Empty: 2m.",
    )
    egress_allow = forms.CharField(
        required=False,
        label="Hosts live sandboxes may reach",
        help_text="One host:port a line, e.g. pypi.example.org:443; empty: no network.",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
    )
    warm_pool = forms.CharField(
        required=False,
        label="Live sandboxes kept started ahead",
        help_text="One a line: how many, then the template; a number alone: the host's system.",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
    )

    task_type_names = TASK_TYPES

    def __init__(self, *args: Any, rows: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        posted = _posted_rows(self.data) if self.is_bound else 0
        more = 1 if self.is_bound and "add_row" in self.data else 0
        self.row_count = min(max(rows + EMPTY_ROWS, posted) + more, MAX_ROWS)
        for i in range(self.row_count):
            self.fields[f"w{i}-from"] = forms.CharField(
                required=False, label=f"Window {i + 1} from"
            )
            self.fields[f"w{i}-to"] = forms.CharField(required=False, label=f"Window {i + 1} to")
            for t in TASK_TYPES:
                self.fields[f"w{i}-{t}"] = forms.FloatField(
                    required=False, min_value=0.01, max_value=10, label=f"Window {i + 1}: {t}"
                )
            self.fields[f"w{i}-remove"] = forms.BooleanField(
                required=False, label=f"Remove window {i + 1}"
            )

    @classmethod
    def for_queue(cls, queue: Queue, data: Any = None) -> QueueEditForm:
        windows = list(queue.weight_schedule or [])
        return cls(data, initial=queue_initial(queue), rows=len(windows))

    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.declared_fields]

    def weight_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "number": i + 1,
                "from": self[f"w{i}-from"],
                "to": self[f"w{i}-to"],
                "weights": [self[f"w{i}-{t}"] for t in TASK_TYPES],
                "remove": self[f"w{i}-remove"],
            }
            for i in range(self.row_count)
        ]

    def clean_warm_pool(self) -> dict[str, Any]:
        return parse_warm_pool(self.cleaned_data.get("warm_pool") or "")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        default, longest = cleaned.get("default_walltime"), cleaned.get("max_walltime")
        if default and longest and default > longest:
            self.add_error("default_walltime", "must not be longer than the longest run")
        self._clean_rows(cleaned)
        return cleaned

    def _clean_rows(self, cleaned: dict[str, Any]) -> None:
        """Rows with anything typed must have both times and a weight; empty ones are left out."""
        self.kept_rows: list[int] = []
        for i in range(self.row_count):
            if cleaned.get(f"w{i}-remove"):
                continue
            times = [(cleaned.get(f"w{i}-{k}") or "").strip() for k in ("from", "to")]
            weights = {t: cleaned.get(f"w{i}-{t}") for t in TASK_TYPES}
            if not any(times) and all(w is None for w in weights.values()):
                continue
            for key, text in zip(("from", "to"), times, strict=True):
                if not _TIME.fullmatch(text):
                    self.add_error(f"w{i}-{key}", f"a time of day such as 08:00; got {text!r}")
            if all(w is None for w in weights.values()):
                self.add_error(f"w{i}-{TASK_TYPES[0]}", "give at least one kind of work a weight")
            self.kept_rows.append(i)

    def changes(self) -> dict[str, Any]:
        """The cleaned form as the queue's values (what `queue_form_data` takes)."""
        data = self.cleaned_data
        seconds = {
            "max_walltime",
            "default_walltime",
            "startup_timeout",
            "idle_scale_in",
            "wait_bound",
        }
        changes = {f"{name}_s": data[name] for name in seconds}
        for name in ("policy", "task_types", "allocation", "requires_estimate", "preemptible"):
            changes[name] = data[name]
        for name in ("cpu_oversubscription", "max_concurrency", "startup_resubmit"):
            changes[name] = data[name]
        changes["over_concurrency"] = data["over_concurrency"]
        changes["egress_allow"] = _lines(data["egress_allow"])
        changes["warm_pool"] = data["warm_pool"]
        changes["weight_schedule"] = [self._window(i) for i in self.kept_rows]
        return changes

    def _window(self, i: int) -> dict[str, Any]:
        data = self.cleaned_data
        weights = {t: _number(data[f"w{i}-{t}"]) for t in TASK_TYPES if data[f"w{i}-{t}"]}
        start, end = (_hhmm(data[f"w{i}-{k}"]) for k in ("from", "to"))
        return {"from": start, "to": end, "weights": weights}

    def field_for(self, field: str | None) -> str | None:
        """The page's field for an error the service names (`weight_schedule[1].to` → a row's)."""
        if not field:
            return None
        if field.endswith("_s") and field[:-2] in self.fields:
            return field[:-2]
        match = re.fullmatch(r"weight_schedule\[(\d+)\](?:\.(from|to|weights)(?:\.(\S+))?)?", field)
        if match and int(match[1]) < len(self.kept_rows):
            row = self.kept_rows[int(match[1])]
            part = match[2] or "from"
            if part == "weights":
                part = match[3] if match[3] in TASK_TYPES else TASK_TYPES[0]
            return f"w{row}-{part}"
        return field if field in self.fields else None


def parse_warm_pool(text: str) -> dict[str, Any]:
    """`2` and `1 python-3.12` lines → {"": 2, "python-3.12": 1}; the service checks the rest."""
    pool: dict[str, Any] = {}
    for line in _lines(text):
        count, _, template = line.partition(" ")
        if not count.isdigit():
            raise forms.ValidationError(f"a number, then a template; got {line[:60]!r}")
        pool[template.strip()] = int(count)
    return pool


def queue_initial(queue: Queue) -> dict[str, Any]:
    """The queue's values as the page shows them (and posts them back unchanged)."""
    initial: dict[str, Any] = {
        name: getattr(queue, name)
        for name in QueueEditForm.declared_fields
        if hasattr(queue, name) and name not in ("egress_allow", "warm_pool")
    }
    for name in (
        "max_walltime",
        "default_walltime",
        "startup_timeout",
        "idle_scale_in",
        "wait_bound",
    ):
        initial[name] = duration_text(getattr(queue, f"{name}_s"))
    initial["egress_allow"] = "\n".join(str(h) for h in queue.egress_allow or [])
    initial["warm_pool"] = "\n".join(f"{n} {t}".strip() for t, n in (queue.warm_pool or {}).items())
    for i, window in enumerate(queue.weight_schedule or []):
        initial[f"w{i}-from"], initial[f"w{i}-to"] = window.get("from"), window.get("to")
        for t, weight in (window.get("weights") or {}).items():
            initial[f"w{i}-{t}"] = weight
    return initial


def _posted_rows(data: Any) -> int:
    return max(
        (int(m[1]) + 1 for key in data if (m := re.fullmatch(r"w(\d+)-from", key))), default=0
    )


def _lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _hhmm(text: str) -> str:
    hours, minutes = text.strip().split(":")
    return f"{int(hours):02d}:{minutes}"


class LeaseScheduleForm(forms.Form):
    """One nightly lease on the Capacity page; a prefix per row keeps the rows apart."""

    schedule: LeaseSchedule | None = None
    reason_error = ""  # an error about the reason, or none of the fields
    reason_value = ""

    pool = forms.ModelChoiceField(
        queryset=Pool.objects.order_by("name"), to_field_name="name", label="Lend nodes of"
    )
    queue = forms.ModelChoiceField(
        queryset=Queue.objects.order_by("name"), to_field_name="name", label="to queue"
    )
    count = forms.IntegerField(min_value=1, max_value=10000, label="How many idle nodes")
    start = forms.TimeField(
        input_formats=["%H:%M"], label="Every day at", help_text="Site time, e.g. 20:00."
    )
    duration = DurationField(label="For", help_text="E.g. 6h, 90m.")
    enabled = forms.BooleanField(required=False, label="On")

    @classmethod
    def for_schedule(cls, schedule: LeaseSchedule | None, data: Any = None) -> LeaseScheduleForm:
        prefix = f"s{schedule.pk}" if schedule else "new"
        if schedule is None:
            initial: dict[str, Any] = {"count": 1, "start": "20:00", "duration": "6h"}
            initial["enabled"] = True
        else:
            initial = {
                "pool": schedule.pool.name,
                "queue": schedule.queue.name,
                "count": schedule.count,
                "start": schedule.start.strftime("%H:%M"),
                "duration": duration_text(schedule.duration_s),
                "enabled": schedule.enabled,
            }
        form = cls(data, initial=initial, prefix=prefix)
        form.schedule = schedule
        return form

    def clean_duration(self) -> int:
        seconds = self.cleaned_data.get("duration")
        if not seconds:
            raise forms.ValidationError("required: a duration such as 10h")
        return seconds

    def field_for(self, field: str | None) -> str | None:
        name = "duration" if field == "duration_s" else field
        return name if name in self.fields else None

    def schedule_values(self) -> dict[str, Any]:
        """The valid form as `lease_schedule_save` takes it (the page and the API both save
        through it)."""
        data = self.cleaned_data
        return {
            "pool": data["pool"],
            "queue": data["queue"],
            "count": data["count"],
            "start": data["start"],
            "duration_s": data["duration"],
            "enabled": data["enabled"],
        }
