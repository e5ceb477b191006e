"""Structured logs: a request's lines carry its id and user, and so do the worker's lines of
the messages it published, with the task's and job's ids (docs/operations.md, "Logs")."""

from __future__ import annotations

import io
import json
import logging
import secrets

import pytest
from rest_framework.test import APIClient

from config import logcontext
from config.logformat import ContextFilter, JsonFormatter, TextFormatter
from scheduling.models import Task
from tests.conftest import descriptor, submit
from tests.unit.portal.test_production_settings import manage

pytestmark = pytest.mark.django_db


@pytest.fixture
def captured():
    """Every line logged during the test as the portal's JSON handler writes it (the same
    filter and formatter as `LOGGING`), parsed: `captured()` reads them so far."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    saved = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    def read() -> list[dict]:
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    yield read
    root.removeHandler(handler)
    root.setLevel(saved)


def test_a_request_is_answered_with_its_id_and_a_malformed_one_is_replaced(site, browser):
    given = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    assert browser.get("/", HTTP_X_REQUEST_ID=given)["X-Request-ID"] == given
    for hostile in ('x"}\n{"level": "ERROR"', "short", "a" * 65, ""):
        answered = browser.get("/", HTTP_X_REQUEST_ID=hostile)["X-Request-ID"]
        assert answered != hostile and len(answered) == 32
    assert browser.get("/")["X-Request-ID"] != browser.get("/")["X-Request-ID"]


def test_a_requests_lines_carry_its_id_and_user(site, api, captured):
    response = api.post(
        "/api/v1/tasks/",
        data=json.dumps(descriptor()),
        content_type="application/json",
        HTTP_X_REQUEST_ID="req-0001-submit",
    )
    assert response.status_code == 201, response.json()
    assert response["X-Request-ID"] == "req-0001-submit"
    task_id = response.json()["id"]
    [asked] = [line for line in captured() if "its dispatch is asked for" in line["message"]]
    assert asked["request_id"] == "req-0001-submit"
    assert asked["user"] == "alice"
    assert asked["task_id"] == task_id
    assert asked["logger"] == "scheduling.outbox" and asked["level"] == "INFO"
    assert asked["timestamp"].endswith("+00:00")


def test_an_error_answer_is_logged_with_the_request_id_and_user(site, browser, captured):
    assert browser.get("/tasks/999999/", HTTP_X_REQUEST_ID="req-0002-missing").status_code == 404
    [line] = [line for line in captured() if line["logger"] == "django.request"]
    assert line["message"] == "Not Found: /tasks/999999/"
    assert line["request_id"] == "req-0002-missing" and line["user"] == "alice"
    assert line["status_code"] == 404 and "request" not in line


def test_an_anonymous_request_has_no_user_and_no_query_for_one(
    db, captured, django_assert_num_queries
):
    client = APIClient()
    with django_assert_num_queries(0):
        client.get("/api/v1/no-such-thing/", HTTP_X_REQUEST_ID="req-0003-anonymous")
    [line] = [line for line in captured() if line["logger"] == "django.request"]
    assert line["request_id"] == "req-0003-anonymous" and "user" not in line


def test_a_task_run_by_the_worker_carries_the_request_that_published_it(
    site, api, worker, captured
):
    with worker():
        response = submit(api, descriptor(name="followed"))
        assert response.status_code == 201, response.json()
    request_id = response["X-Request-ID"]
    task = Task.objects.get(pk=response.json()["id"])
    assert task.state == "queued", task.reason
    lines = [line for line in captured() if line.get("task_id") == task.pk]
    queued = [line for line in lines if "pending → queued" in line["message"]]
    assert len(queued) == 1, lines
    [dispatched] = queued
    assert dispatched["logger"] == "scheduling.states"
    assert dispatched["job_id"] == task.backend_id != ""
    assert dispatched["celery_task"] == "scheduling.dispatch"
    assert dispatched["request_id"] == request_id and dispatched["user"] == "alice"
    assert f"submitted to fake as {task.backend_id}" in dispatched["message"]


def test_a_published_message_carries_the_context_and_the_worker_opens_it(settings):
    from config.celery import LOG_HEADER, _carry_log_context, _close_log_context, _open_log_context

    headers: dict = {}
    with logcontext.bound(request_id="req-0004-publish", user="alice", task_id=7):
        _carry_log_context(headers=headers)
    assert headers[LOG_HEADER] == {"request_id": "req-0004-publish", "user": "alice", "task_id": 7}

    class Request:  # what Celery makes of a message's headers in the worker
        is_eager = False
        id = "0b6c5a3e-celery"

    class Task:
        name = "scheduling.dispatch"
        request = Request()

    setattr(Task.request, LOG_HEADER, headers[LOG_HEADER])
    with logcontext.bound(request_id="req-of-someone-else"):
        _open_log_context(task=Task)
        assert logcontext.fields() == {
            "request_id": "req-0004-publish",
            "user": "alice",
            "task_id": 7,
            "celery_task": "scheduling.dispatch",
            "celery_id": "0b6c5a3e-celery",
        }
        # What it publishes carries the request on, not the worker's own fields.
        assert logcontext.outgoing() == headers[LOG_HEADER]
        _close_log_context(task=Task)
        assert logcontext.fields() == {"request_id": "req-of-someone-else"}


def test_a_message_from_beat_gets_a_request_id_of_its_own():
    from config.celery import _close_log_context, _open_log_context

    class Task:
        name = "scheduling.timers"

        class request:  # noqa: N801 - Celery's attribute
            is_eager = False
            id = "5e1f-beat-sent"

    _open_log_context(task=Task)
    try:
        assert len(logcontext.fields()["request_id"]) == 32
    finally:
        _close_log_context(task=Task)
    assert logcontext.fields() == {}


def test_a_message_for_many_requests_tasks_names_each_tasks_own_request(captured):
    origins = {
        1: {"request_id": "req-a", "user": "alice"},
        2: {"request_id": "req-b", "user": "bob"},
    }
    carried = logcontext.carried([1, 2], origins)
    with logcontext.fresh({**carried, "request_id": "req-message"}):
        log = logging.getLogger("scheduling.states")
        log.info("one", extra={"task_id": 1})
        log.info("two", extra={"task_id": 2})
        log.info("neither")
    one, two, neither = captured()
    assert (one["request_id"], one["user"]) == ("req-a", "alice")
    assert (two["request_id"], two["user"]) == ("req-b", "bob")
    assert neither["request_id"] == "req-message" and "user" not in neither
    assert "origins" not in one
    # One request's tasks: its context, as it is.
    assert logcontext.carried([1], origins) == origins[1]


def test_the_text_format_shows_the_same_fields():
    record = logging.LogRecord("scheduling.states", logging.INFO, __file__, 1, "moved", (), None)
    with logcontext.bound(request_id="req-0005", user="alice", task_id=42, job_id="17"):
        ContextFilter().filter(record)
    text = TextFormatter().format(record)
    assert text.endswith(
        " INFO scheduling.states [request=req-0005 user=alice task=42 job=17] moved"
    )


def test_production_logs_json_and_a_bad_format_is_refused(tmp_path):
    env = {
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "SWITCHYARD_VAR_DIR": str(tmp_path),
    }
    code = "import logging; logging.getLogger('portal.x').warning('hello %s', 'there')"
    done = manage("shell", "-c", code, env=env)
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(text) for text in done.stderr.splitlines() if text.startswith("{")]
    assert (line["level"], line["logger"], line["message"]) == (
        "WARNING",
        "portal.x",
        "hello there",
    )
    refused = manage("check", env={**env, "SWITCHYARD_LOG_FORMAT": "xml"})
    assert refused.returncode != 0
    assert "SWITCHYARD_LOG_FORMAT: expected json or text, got 'xml'" in refused.stderr


def test_the_publisher_thread_sends_each_task_with_the_request_that_stored_it():
    from config.celery import LOG_HEADER, app
    from scheduling import outbox

    def headers_sent() -> list[dict]:
        out = []
        with app.connection_for_read() as conn:
            queue = conn.SimpleQueue(app.conf.task_default_queue)
            try:
                while True:
                    try:
                        message = queue.get(block=False)
                    except queue.Empty:
                        break
                    out.append(message.headers)
                    message.ack()
            finally:
                queue.close()
        return out

    headers_sent()  # an empty queue
    alice = {"request_id": "req-alice-0001", "user": "alice"}
    bob = {"request_id": "req-bob-00001", "user": "bob"}
    # Held, the thread cannot send: both requests' ids leave in one message.
    with outbox.PUBLISHER._cond:
        outbox.PUBLISHER.add(501, alice)
        outbox.PUBLISHER.add(502, bob)
    assert outbox.PUBLISHER.flush(10)
    outbox.PUBLISHER.add(503, alice)
    assert outbox.PUBLISHER.flush(10)
    many, lone = sorted(headers_sent(), key=lambda h: h["task"] != outbox.DISPATCH_MANY)
    assert many[LOG_HEADER] == {"origins": {"501": alice, "502": bob}}
    assert lone["task"] == outbox.DISPATCH and lone[LOG_HEADER] == alice
