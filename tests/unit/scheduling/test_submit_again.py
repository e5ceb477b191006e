"""Submit again from a task's page: a task made with the form's fields opens in the fields,
its project chosen; a descriptor opens in the descriptor box as it was stored."""

from __future__ import annotations

import re

import pytest

from scheduling.models import Task
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

FIELDS = {
    "name": "md-simulation",
    "project": "climate",  # not her first project: the form must not fall back to it
    "command": "python3 md.py --steps '10 000'",
    "cpus": "4",
    "gpus": "0",
    "memory": "4Gi",
    "walltime": "15m",
    "type": "hpc-simulation",
    "estimate": "10m",
}


def _value(page: str, name: str) -> str | None:
    """The input's value ("" for one without), or None when there is no such input."""
    found = re.search(rf'<input[^>]*name="{name}"[^>]*>', page)
    if not found:
        return None
    value = re.search(r'value="([^"]*)"', found.group(0))
    return value.group(1) if value else ""


def _selected(page: str, name: str) -> str | None:
    select = page.split(f'name="{name}"', 1)[1].split("</select>", 1)[0]
    found = re.search(r'<option value="([^"]*)" selected>', select)
    return found.group(1) if found else None


def test_a_task_made_with_the_fields_opens_in_the_fields_with_its_project(browser):
    assert browser.post("/tasks/new/", FIELDS).status_code == 302
    task = Task.objects.get()
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert f'href="/tasks/new/?from={task.pk}" id="submit-again"' in page
    again = browser.get(f"/tasks/new/?from={task.pk}").content.decode()
    assert _selected(again, "project") == "climate"
    assert _selected(again, "type") == "hpc-simulation"
    assert _value(again, "name") == "md-simulation"
    assert _value(again, "command") == "python3 md.py --steps &#x27;10 000&#x27;"
    for name in ("cpus", "gpus", "memory", "walltime", "estimate"):
        assert _value(again, name) == FIELDS[name], name
    box = again.split('name="descriptor"', 1)[1].split("</textarea>", 1)[0]
    assert box.endswith(">\n")  # the descriptor box stays empty: the fields hold it all
    # Submitted as it opens, it is the same task again.
    resubmitted = {**FIELDS, "command": "python3 md.py --steps '10 000'"}
    assert browser.post("/tasks/new/", resubmitted).status_code == 302
    first, second = Task.objects.order_by("pk")
    assert first.descriptor == second.descriptor and first.spec == second.spec


def test_a_field_left_empty_stays_empty_not_the_forms_default(browser):
    fields = {**FIELDS, "walltime": "", "memory": ""}
    assert browser.post("/tasks/new/", fields).status_code == 302
    again = browser.get(f"/tasks/new/?from={Task.objects.get().pk}").content.decode()
    assert _value(again, "walltime") == "" and _value(again, "memory") == ""


def test_a_descriptor_written_by_hand_opens_in_the_box(api, browser):
    made = submit(api, descriptor(name="by-hand", env={"A": "1"}))
    assert made.status_code == 201, made.json()
    again = browser.get(f"/tasks/new/?from={made.json()['id']}").content.decode()
    box = again.split('name="descriptor"', 1)[1].split("</textarea>", 1)[0]
    assert "by-hand" in box and "&quot;env&quot;" in box
    assert _value(again, "name") in (None, "")
