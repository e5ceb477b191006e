"""The queue admin's page for a queue: durations as 72h, kinds of work as checkboxes, the weight
schedule as rows, one error per field and a "not saved" banner (docs/console.md)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from portal.models import ConfigVersion
from scheduling.forms_admin import queue_initial
from scheduling.models import Queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def quinn(site) -> Client:
    client = Client()
    client.force_login(User.objects.get(username="quinn"))
    return client


def _post(client: Client, queue: Queue, reason: str = "a test", **changes):
    """The page as the browser posts it: the queue's values, `changes` typed over them."""
    data = {k: ("" if v is None else v) for k, v in queue_initial(queue).items()}
    for key in [k for k, v in data.items() if v is False]:
        del data[key]  # an unticked checkbox is not posted
    data.update(changes, reason=reason)
    return client.post(f"/queues/{queue.name}/edit/", data)


def test_it_shows_durations_in_hours_not_seconds(quinn):
    Queue.objects.filter(name="hpc").update(max_walltime_s=259200)
    page = quinn.get("/queues/hpc/edit/").content.decode()
    assert 'value="72h"' in page
    assert "Longest run" in page and "Max walltime s" not in page
    assert 'type="checkbox" name="task_types"' in page


def test_it_accepts_72h_and_records_a_version_with_the_reason(quinn):
    queue = Queue.objects.get(name="hpc")
    queue.max_walltime_s = 3600
    queue.default_walltime_s = None
    queue.save()
    response = _post(quinn, queue, reason="longer runs this week", max_walltime="72h")
    assert response.status_code == 302
    queue.refresh_from_db()
    assert queue.max_walltime_s == 72 * 3600
    version = ConfigVersion.objects.filter(model="scheduling.queue", object_id=queue.pk).latest(
        "id"
    )
    assert version.reason == "longer runs this week"


def test_a_bad_duration_shows_one_error_on_that_field_and_not_saved(quinn):
    queue = Queue.objects.get(name="hpc")
    before = queue.max_walltime_s
    response = _post(quinn, queue, max_walltime="3 days")
    page = response.content.decode()
    assert response.status_code == 400
    assert 'id="not-saved"' in page and "Not saved" in page
    assert page.count('class="field-error"') == 1
    assert 'id="error-max_walltime"' in page
    assert "must be a duration such as 90s" in page and "got &#x27;3 days&#x27;" in page
    queue.refresh_from_db()
    assert queue.max_walltime_s == before


def test_task_types_are_ticked_and_saved_as_a_list(quinn):
    queue = Queue.objects.get(name="hpc")
    assert _post(quinn, queue, task_types=["hpc-simulation", "ai-training"]).status_code == 302
    queue.refresh_from_db()
    assert queue.task_types == ["hpc-simulation", "ai-training"]


def test_weight_rows_become_the_schedule_and_empty_rows_are_left_out(quinn):
    queue = Queue.objects.get(name="hpc")
    queue.weight_schedule = []
    queue.save()
    response = _post(quinn, queue, **{"w0-from": "8:00", "w0-to": "20:00", "w0-agent": "2"})
    assert response.status_code == 302, response.content.decode()[:2000]
    queue.refresh_from_db()
    assert queue.weight_schedule == [{"from": "08:00", "to": "20:00", "weights": {"agent": 2}}]
    # removed again with the row's box
    assert _post(quinn, queue, **{"w0-remove": "on"}).status_code == 302
    queue.refresh_from_db()
    assert queue.weight_schedule == []


def test_a_bad_row_is_marked_on_its_own_field(quinn):
    queue = Queue.objects.get(name="hpc")
    response = _post(quinn, queue, **{"w0-from": "25:00", "w0-to": "06:00", "w0-agent": "2"})
    page = response.content.decode()
    assert response.status_code == 400
    assert page.count('class="field-error"') == 1 and 'id="error-w0-from"' in page
    assert "a time of day such as 08:00" in page


def test_a_same_from_and_to_comes_back_from_the_service_on_the_row(quinn):
    queue = Queue.objects.get(name="hpc")
    response = _post(quinn, queue, **{"w0-from": "08:00", "w0-to": "08:00", "w0-agent": "2"})
    page = response.content.decode()
    assert response.status_code == 400
    assert page.count('class="field-error"') == 1 and 'id="error-w0-to"' in page


def test_add_a_row_offers_one_more_and_saves_nothing(quinn):
    queue = Queue.objects.get(name="hpc")
    page = quinn.get("/queues/hpc/edit/").content.decode()
    rows = page.count('id="window-')
    response = _post(quinn, queue, add_row="1", max_walltime="1h")
    assert response.content.decode().count('id="window-') == rows + 1
    queue.refresh_from_db()
    assert queue.max_walltime_s != 3600


def test_the_reason_is_still_required(quinn):
    queue = Queue.objects.get(name="hpc")
    response = _post(quinn, queue, reason="", max_concurrency="7")
    page = response.content.decode()
    assert response.status_code == 400 and "Not saved" in page and "say why" in page
    queue.refresh_from_db()
    assert queue.max_concurrency != 7


def test_a_default_longer_than_the_longest_run_is_refused_in_words(quinn):
    queue = Queue.objects.get(name="hpc")
    response = _post(quinn, queue, max_walltime="1h", default_walltime="2h")
    page = response.content.decode()
    assert 'id="error-default_walltime"' in page
    assert "must not be longer than the longest run" in page
    assert "_s" not in page.split('id="error-default_walltime"')[1].split("</p>")[0]


def test_the_api_still_takes_seconds(site):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(User.objects.get(username="quinn"))
    response = api.patch(
        "/api/v1/queues/hpc/",
        {"max_walltime_s": 100 * 3600, "weight_schedule": [], "reason": "api"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert Queue.objects.get(name="hpc").max_walltime_s == 100 * 3600


def test_saving_the_page_unchanged_says_nothing_changed(quinn):
    queue = Queue.objects.get(name="hpc")
    response = _post(quinn, queue)
    page = response.content.decode()
    assert response.status_code == 400 and "Not saved" in page and "nothing changed" in page
