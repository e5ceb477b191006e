"""The Submit page's example agent task, as shipped, on the real local backend with a worker:
it reaches the portal's sandbox API through its relay (and nothing else of the portal), makes
a live sandbox, runs its tool calls there and deletes it; its page lists the sandbox, whose
page shows what ran (docs/sandboxes.md, "From a batch task"; docs/sandbox-network.md)."""

from __future__ import annotations

import html
import json
import socket
from urllib.parse import urlsplit

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scheduling.engine.registry import get_backend
from scheduling.models import Sandbox, Task
from tests.conftest import descriptor
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ENDED = ("succeeded", "failed", "cancelled")
# From inside a task with `sandboxes: true`: another API through the relay, and the web
# port itself (the sandbox's loopback is its own).
PROBE = """
import os, socket, urllib.error, urllib.request
url = os.environ["SWITCHYARD_URL"] + "/api/v1/tasks/"
ask = urllib.request.Request(url, headers={"Authorization": "Token " + os.environ["SWITCHYARD_TOKEN"]})
try:
    urllib.request.urlopen(ask, timeout=20)
    print("tasks: reached")
except urllib.error.HTTPError as exc:
    print("tasks:", exc.code, exc.read().decode().strip())
host, port = os.environ["WEB"].rsplit(":", 1)
try:
    socket.create_connection((host, int(port)), timeout=5).close()
    print("web: reached")
except OSError as exc:
    print("web: not reached:", type(exc).__name__)
"""


@pytest.fixture
def browser(site) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.get(username="alice"))
    return client


@pytest.fixture
def api(site) -> APIClient:
    from django.contrib.auth.models import User

    client = APIClient()
    client.force_authenticate(User.objects.get(username="alice"))
    return client


def _ended(pk: int) -> Task | None:
    task = Task.objects.get(pk=pk)
    return task if task.state in ENDED else None


def test_the_example_agent_task_runs_its_tool_calls_in_a_sandbox_it_makes(
    live_server, start_worker, browser, api, settings
):
    web = urlsplit(live_server.url).netloc
    settings.SWITCHYARD_WEB_ADDR = web  # sandboxes the live server starts run here too
    proc = start_worker(extra_env={"SWITCHYARD_WEB_ADDR": web})
    page = browser.get("/tasks/new/").content.decode()
    example = html.unescape(page.split('<pre id="example-agent">', 1)[1].split("</pre>")[0])
    made = api.post("/api/v1/tasks/", data=example, content_type="application/yaml")
    assert made.status_code == 201, made.content
    probes = []
    for kind in ("agent", "hpc-simulation"):  # no network, and a batch job's own (slirp4netns)
        probe = descriptor(
            name=f"probe-{kind}",
            project="climate",
            type=kind,
            sandboxes=True,
            command=["python3", "-c", PROBE],
            env={"WEB": web},
        )
        sent = api.post("/api/v1/tasks/", data=json.dumps(probe), content_type="application/json")
        assert sent.status_code == 201, sent.content
        probes.append(sent.json()["id"])

    task = wait_for(lambda: _ended(made.json()["id"]), timeout=60, what="the agent task")
    log = api.get(f"/api/v1/tasks/{task.pk}/log/").json()["log"]
    assert task.state == "succeeded", (task.state, task.reason, log, worker_log(proc))
    assert "tool call 1: write fib.py -> " in log
    assert "tool call 2: python3 fib.py 30 -> exit 0: 832040" in log
    assert "-> exit 0: 20 bytes" in log  # tool call 3: its answer written to a file
    assert "tool call 4: read result.txt -> 2880067194370816120" in log
    relay = get_backend("local").store.path(task.backend_id, "api.sock")
    with pytest.raises(ConnectionRefusedError), socket.socket(socket.AF_UNIX) as s:
        s.connect(relay)  # the relay ended with its task
    [sandbox] = Sandbox.objects.filter(created_by_task=task)
    assert f"deleted sandbox {sandbox.public_id}: ended" in log
    assert (sandbox.state, sandbox.end_reason) == ("ended", "deleted")
    assert sandbox.exec_count == 2
    task_page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert "Sandboxes it used" in task_page
    assert f"/sandboxes/{sandbox.public_id}/" in task_page
    history = html.unescape(browser.get(f"/sandboxes/{sandbox.public_id}/").content.decode())
    assert "python3 fib.py 30" in history and "832040" in history

    for pk in probes:
        other = wait_for(lambda pk=pk: _ended(pk), timeout=30, what="a probe task")
        said = api.get(f"/api/v1/tasks/{other.pk}/log/").json()["log"]
        assert other.state == "succeeded", (other.name, other.reason, said)
        assert "tasks: 403 switchyard sandbox-api relay: only the sandbox API" in said, said
        assert "web: not reached: ConnectionRefusedError" in said, said
