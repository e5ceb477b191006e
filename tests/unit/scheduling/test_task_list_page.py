"""The task list: filters in the query string (kept by the pager and the 2-s refresh), the
owner, elapsed and node columns, relative times, and bad filter values answered as such."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from scheduling.models import Attempt, Task
from tests.conftest import descriptor, submit


def _task(api, name: str, **fields) -> Task:
    response = submit(api, descriptor(name=name, **fields))
    assert response.status_code == 201, response.json()
    return Task.objects.get(pk=response.json()["id"])


def _ids(page: str) -> set[int]:
    return {int(t.pk) for t in Task.objects.all() if f'id="task-{t.pk}"' in page}


@pytest.fixture
def tasks(api, outsider_api) -> dict[str, Task]:
    now = timezone.now()
    made = {
        "md": _task(api, "md-simulation", type="hpc-simulation"),
        "train": _task(api, "agent-calls", type="agent", project="climate"),
        "old": _task(api, "old-md-run", type="hpc-simulation"),
    }
    Task.objects.filter(pk=made["md"].pk).update(
        state="running", started_at=now - timedelta(minutes=12)
    )
    Attempt.objects.create(task=made["md"], number=1, key="k-md-1", nodes=["gpu003", "gpu004"])
    Task.objects.filter(pk=made["old"].pk).update(
        state="succeeded",
        submitted_at=now - timedelta(days=10),
        started_at=now - timedelta(days=10),
        ended_at=now - timedelta(days=10) + timedelta(hours=3, minutes=5),
    )
    Task.objects.filter(pk=made["train"].pk).update(state="waiting", submitted_at=now)
    for t in made.values():
        t.refresh_from_db()
    return made


def test_each_filter_narrows_the_list(browser, tasks):
    md, train, old = tasks["md"], tasks["train"], tasks["old"]
    cases = {
        "project=climate": {train.pk},
        "owner=alice": {md.pk, train.pk, old.pk},
        "owner=bob": set(),
        "type=agent": {train.pk},
        "state=running": {md.pk},
        "queue=hpc": {md.pk, old.pk},
        "q=MD": {md.pk, old.pk},
        f"submitted_from={(timezone.now() - timedelta(days=1)).date()}": {md.pk, train.pk},
        f"submitted_to={(timezone.now() - timedelta(days=5)).date()}": {old.pk},
        "q=md&state=succeeded": {old.pk},
    }
    for query, expected in cases.items():
        response = browser.get(f"/?{query}")
        assert response.status_code == 200, query
        assert _ids(response.content.decode()) == expected, query


def test_the_columns_say_owner_elapsed_nodes_and_a_moving_time(browser, tasks):
    page = browser.get("/").content.decode()
    row = page[page.index(f'id="task-{tasks["md"].pk}"') :].split("</tr>")[0]
    assert 'class="owner">alice<' in row
    assert "running 12min" in row
    assert "gpu003-gpu004" in row
    assert "<time datetime=" in row and "data-relative" in row
    old = page[page.index(f'id="task-{tasks["old"].pk}"') :].split("</tr>")[0]
    assert "ran 3h05" in old and "10 days ago" in old
    waiting = page[page.index(f'id="task-{tasks["train"].pk}"') :].split("</tr>")[0]
    assert "waited 0s" in waiting or "waited 1s" in waiting
    assert "just now" in waiting and "0 minutes" not in page


def test_filters_are_kept_by_the_refresh_and_the_pager(browser, api, tasks):
    for i in range(51):
        _task(api, f"sweep-{i}", type="hpc-simulation")
    page = browser.get("/?q=sweep&queue=hpc").content.decode()
    assert 'hx-get="/?queue=hpc&amp;q=sweep&amp;page=1"' in page
    assert 'href="?queue=hpc&amp;q=sweep&amp;page=2"' in page
    fragment = browser.get("/?queue=hpc&q=sweep&page=2", HTTP_HX_REQUEST="true")
    assert "<html" not in fragment.content.decode()
    assert len(_ids(fragment.content.decode())) == 1


@pytest.mark.parametrize(
    ("query", "field", "said"),
    [
        ("state=sleeping", "state", "one of pending, waiting"),
        ("submitted_from=yesterday", "submitted_from", "a date as YYYY-MM-DD"),
        ("submitted_from=2026-12-05&submitted_to=2026-12-01", "submitted_to", "on or after"),
        ("q=" + "x" * 200, "q", "at most 150 characters"),
    ],
)
def test_a_bad_filter_value_is_said_plainly_and_left_out(browser, tasks, query, field, said):
    response = browser.get(f"/?{query}")
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="filter-errors"' in page and f"<b>{field}</b>" in page and said in page
    assert 'id="task-rows"' in page  # the list itself still answers


def test_a_queue_admin_filters_the_tasks_of_their_queues(tasks):
    quinn = Client()
    quinn.force_login(User.objects.get(username="quinn"))
    page = quinn.get("/?project=climate").content.decode()
    assert _ids(page) == {tasks["train"].pk}
