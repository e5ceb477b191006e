"""The browser pages through Django's test client: login, list, submit, task page, cancel."""

from __future__ import annotations

import html
import json

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils.html import escape

from scheduling import services, states
from scheduling.models import Task
from tests.conftest import descriptor

pytestmark = pytest.mark.django_db

FIELDS = {
    "name": "from-form",
    "project": "materials",
    "command": "sh -c 'echo hi'",
    "cpus": "1",
    "gpus": "0",
    "memory": "1Gi",
    "walltime": "5m",
}


def _task(user: User, **overrides) -> Task:
    return services.task_submit(user=user, text=json.dumps(descriptor(**overrides)), fmt="json")


def _page(response) -> str:
    return response.content.decode()


# --- login ------------------------------------------------------------------------------------


def test_the_login_page_names_the_product_and_logs_a_researcher_in(site):
    client = Client()
    page = client.get("/login/")
    assert page.status_code == 200
    assert "Switchyard" in _page(page) and 'name="password"' in _page(page)

    response = client.post("/login/", {"username": "alice", "password": "alice-demo-pass"})
    assert response.status_code == 302 and response["Location"] == "/home/"
    home = client.get("/home/")  # a researcher's home: their tasks
    assert home.status_code == 302 and home["Location"] == "/"
    assert client.get("/").status_code == 200


def test_a_wrong_password_shows_the_error_on_the_login_page(site):
    response = Client().post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert "did not match" in _page(response)


def test_the_task_list_requires_login(site):
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=/")


# --- submit: fields -----------------------------------------------------------------------------


def test_the_submit_page_explains_the_fields_and_shows_an_example(browser):
    page = _page(browser.get("/tasks/new/"))
    assert '<option value="materials"' in page and '<option value="genomics"' not in page
    assert "hard limit" in page  # walltime is explained, not just named
    assert "<details" in page and "apiVersion: switchyard/v1" in page  # the example descriptor


def test_the_example_descriptor_on_the_page_is_accepted_as_it_stands(browser):
    page = _page(browser.get("/tasks/new/"))
    example = html.unescape(page.split('<pre id="example-descriptor">', 1)[1].split("</pre>")[0])
    response = browser.post("/tasks/new/", {"descriptor": example})
    assert response.status_code == 302, _page(response)
    assert Task.objects.get().project.slug in ("materials", "climate")  # one of hers


def test_the_fields_create_a_task_and_redirect_to_its_page(browser, researcher):
    response = browser.post("/tasks/new/", FIELDS)
    task = Task.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tasks/{task.pk}/"
    assert (task.name, task.project.slug, task.owner) == ("from-form", "materials", researcher)
    assert task.spec["command"] == ["sh", "-c", "echo hi"]
    assert task.spec["walltime_s"] == 300
    assert task.descriptor_format == "json"


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("walltime", "forever", "duration"),
        ("cpus", "100000", "cpu"),  # valid as a number, too big for any node of the site
        ("command", "echo 'unclosed", "cannot split"),
    ],
)
def test_a_bad_field_shows_its_error_beside_it_and_stores_nothing(browser, field, value, words):
    response = browser.post("/tasks/new/", {**FIELDS, field: value})
    assert response.status_code == 400
    page = _page(response)
    error = page.split(f'id="error-{field}"', 1)
    assert len(error) == 2, f"no error beside {field}:\n{page}"
    assert words in error[1].split("</", 1)[0].lower()
    assert f'value="{escape(value)}"' in page  # what was typed is kept
    assert Task.objects.count() == 0


def test_a_project_the_user_is_not_in_is_refused_beside_the_field(browser):
    response = browser.post("/tasks/new/", {**FIELDS, "project": "genomics"})
    assert response.status_code == 400
    assert 'id="error-project"' in _page(response)
    assert Task.objects.count() == 0


# --- submit: descriptor text and file ------------------------------------------------------------

UNKNOWN_FIELD_YAML = """\
apiVersion: switchyard/v1
kind: Task
name: typo
project: materials
resources: {cpus: 1, gpu: 1}
walltime: 5m
command: ["true"]
"""


def test_a_descriptor_in_the_textarea_creates_a_task(browser):
    text = UNKNOWN_FIELD_YAML.replace("gpu: 1", "gpus: 0")
    response = browser.post("/tasks/new/", {"descriptor": text})
    task = Task.objects.get()
    assert response["Location"] == f"/tasks/{task.pk}/"
    assert task.descriptor == text and task.descriptor_format == "yaml"


def test_a_descriptor_sent_with_a_browsers_crlf_line_breaks_is_accepted(browser):
    # Browsers encode a textarea's line breaks as CRLF; the parser itself refuses CR.
    text = UNKNOWN_FIELD_YAML.replace("gpu: 1", "gpus: 0")
    response = browser.post("/tasks/new/", {"descriptor": text.replace("\n", "\r\n")})
    assert response.status_code == 302, _page(response)
    assert Task.objects.get().descriptor == text


def test_a_descriptor_with_an_unknown_field_names_it_and_stores_nothing(browser):
    response = browser.post("/tasks/new/", {"descriptor": UNKNOWN_FIELD_YAML})
    assert response.status_code == 400
    page = _page(response)
    assert "<code>resources.gpu</code>" in page
    assert "name: typo" in page  # the text is kept to fix it
    assert Task.objects.count() == 0


def test_an_uploaded_descriptor_goes_through_the_same_validation(browser):
    upload = SimpleUploadedFile("task.yaml", UNKNOWN_FIELD_YAML.encode(), "application/yaml")
    response = browser.post("/tasks/new/", {"descriptor_file": upload})
    assert response.status_code == 400
    assert "<code>resources.gpu</code>" in _page(response)
    assert Task.objects.count() == 0

    good = json.dumps(descriptor(name="uploaded")).encode()
    upload = SimpleUploadedFile("task.json", good, "application/json")
    response = browser.post("/tasks/new/", {"descriptor_file": upload})
    task = Task.objects.get()
    assert response["Location"] == f"/tasks/{task.pk}/"
    assert (task.name, task.descriptor_format) == ("uploaded", "json")


# --- list ---------------------------------------------------------------------------------------


def test_the_list_shows_only_the_users_projects_tasks(browser, researcher, outsider):
    mine = _task(researcher, name="mine")
    theirs = _task(outsider, name="theirs", project="genomics")
    page = _page(browser.get("/"))
    assert f'id="task-{mine.pk}"' in page and ">mine<" in page
    assert f'id="task-{theirs.pk}"' not in page and "theirs" not in page


def test_an_empty_list_says_how_to_start(browser):
    page = _page(browser.get("/"))
    assert "No tasks yet" in page and 'href="/tasks/new/"' in page


def test_the_htmx_refresh_of_the_list_returns_only_rows(browser, researcher):
    task = _task(researcher, name="row")
    response = browser.get("/", HTTP_HX_REQUEST="true")
    page = _page(response)
    assert response.status_code == 200
    assert "<html" not in page and "<table" not in page
    assert f'<tr id="task-{task.pk}" data-state="pending"' in page


def test_the_list_filters_by_state(browser, researcher):
    pending = _task(researcher, name="still-pending")
    services.task_cancel(user=researcher, task=_task(researcher, name="gone"))
    page = _page(browser.get("/?state=cancelled"))
    assert ">gone<" in page and f'id="task-{pending.pk}"' not in page


# --- task page and cancel ---------------------------------------------------------------------


def test_the_task_page_explains_where_it_went_and_why_it_waits(browser, researcher):
    task = _task(researcher, name="explained")
    page = _page(browser.get(f"/tasks/{task.pk}/"))
    assert task.routing_reason in page
    assert task.classify_reason in page
    assert "waiting for the dispatcher" in page  # the wait reason
    assert 'class="timeline"' in page and "submitted by alice" in page
    assert 'id="cancel"' in page


def test_the_task_page_htmx_refresh_returns_only_the_status(browser, researcher):
    task = _task(researcher, name="fragment")
    page = _page(browser.get(f"/tasks/{task.pk}/", HTTP_HX_REQUEST="true"))
    assert (
        "<html" not in page and 'id="task-status"' in page and "waiting for the dispatcher" in page
    )


def test_another_projects_task_page_and_cancel_are_404(outsider_browser, researcher):
    task = _task(researcher, name="private")
    assert outsider_browser.get(f"/tasks/{task.pk}/").status_code == 404
    assert outsider_browser.post(f"/tasks/{task.pk}/cancel/").status_code == 404
    task.refresh_from_db()
    assert task.state == "pending"


def test_cancel_on_a_pending_task_cancels_it_and_hides_the_button(browser, researcher):
    task = _task(researcher, name="to-cancel")
    response = browser.post(f"/tasks/{task.pk}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/tasks/{task.pk}/"
    task.refresh_from_db()
    assert task.state == "cancelled" and task.reason == "cancelled by alice"
    page = _page(browser.get(f"/tasks/{task.pk}/"))
    assert 'id="cancel"' not in page and "cancelled by alice" in page


def test_a_get_of_cancel_only_asks(browser, researcher):
    task = _task(researcher, name="get-cancel")
    response = browser.get(f"/tasks/{task.pk}/cancel/")
    assert response.status_code == 200 and 'id="cancel-confirm-button"' in _page(response)
    task.refresh_from_db()
    assert task.state == "pending"


def test_cancelling_a_finished_task_says_why_on_the_page(browser, researcher):
    task = _task(researcher, name="done")
    states.task_set_state(task=task, to="succeeded", reason="exit 0")
    response = browser.post(f"/tasks/{task.pk}/cancel/", follow=True)
    assert "already ended" in _page(response)
    task.refresh_from_db()
    assert task.state == "succeeded"
