"""A batch agent task that uses live sandboxes: the shipped example on the Submit page, the
local backend's plan for its relay to the sandbox API, and the refusal of `sandboxes: true`
on a backend whose jobs have no such relay (docs/sandboxes.md, docs/sandbox-network.md)."""

from __future__ import annotations

import html

import pytest
import yaml

from config.runtime.management.commands.up import reachable
from scheduling.backends.imagebox import CannotRun
from scheduling.backends.local.jobstore import JobStore
from scheduling.backends.local.sessionplan import api_relay
from scheduling.backends.session import box
from scheduling.models import Pool, Queue, Task
from scheduling.selectors import site_view_invalidate
from scheduling.spec import TaskSpec
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db


def _on_slurm(queue: str, settings) -> None:
    slurm = {"BACKEND": "scheduling.backends.slurm.SlurmBackend", "OPTIONS": {}}
    settings.COMPUTE_BACKENDS = {**settings.COMPUTE_BACKENDS, "slurm": slurm}
    Pool.objects.filter(pk=Queue.objects.get(name=queue).pool_id).update(backend="slurm")
    site_view_invalidate()


def test_sandboxes_true_on_slurm_is_refused_at_submission_naming_the_backend(api, settings):
    _on_slurm("inference-agent", settings)
    refused = submit(api, descriptor(type="agent", sandboxes=True))
    assert refused.status_code == 400, refused.content
    [error] = refused.json()["errors"]
    assert error["field"] == "sandboxes" and error["got"] is True
    assert "the Slurm backend (slurm)" in error["message"]
    assert "local backend" in error["message"]
    assert not Task.objects.exists()
    # The same task without sandboxes goes there as before.
    assert submit(api, descriptor(type="agent")).status_code == 201


def test_sandboxes_true_on_the_fake_and_local_backends_is_taken(api):
    assert submit(api, descriptor(type="agent", sandboxes=True)).status_code == 201


def test_the_submit_page_offers_the_agent_example_for_the_researchers_project(browser):
    page = browser.get("/tasks/new/").content.decode()
    shown = html.unescape(page.split('<pre id="example-agent">', 1)[1].split("</pre>")[0])
    doc = yaml.safe_load(shown)
    assert (doc["type"], doc["sandboxes"]) == ("agent", True)
    assert doc["project"] == doc["env"]["PROJECT"] == "climate"  # alice's first
    assert "urllib.request" in doc["script"] and "DELETE" in doc["script"]
    started = browser.get("/tasks/new/?template=agent-tools").content.decode()
    assert "template-agent-tools" in started
    box_text = started.split('name="descriptor"', 1)[1].split("</textarea>")[0]
    assert "sandboxes: true" in html.unescape(box_text)


def test_the_local_plan_wraps_the_command_in_the_forwarder_and_binds_the_relay(tmp_path):
    store = JobStore(str(tmp_path))
    env: dict[str, str] = {"SWITCHYARD_URL": "http://portal.example.org"}
    spec = TaskSpec(name="a", project="p", command=("python3", "agent.py"), sandboxes=True)
    relay = api_relay(store, "k1", spec, env, "127.0.0.1:8000", None)
    assert relay is not None
    assert env["SWITCHYARD_URL"] == f"http://127.0.0.1:{box.API_PORT}"
    assert relay.prefix[3:] == [box.FORWARD, "--to", f"{box.API_PORT}={box.API_SOCKET}", "--"]
    socket = store.path("k1", "api.sock")
    assert relay.plan == {"socket_path": socket, "web": "127.0.0.1:8000"}
    assert relay.mounts[-3:] == ["--ro-bind", socket, box.API_SOCKET]
    plain = TaskSpec(name="a", project="p", command=("true",))
    assert api_relay(store, "k2", plain, {}, "127.0.0.1:8000", None) is None
    with pytest.raises(CannotRun, match="SWITCHYARD_WEB_ADDR"):
        api_relay(store, "k3", spec, {}, "", None)


def test_manage_up_tells_its_worker_where_the_relay_reaches_the_web_server():
    assert reachable("127.0.0.1:9000") == "127.0.0.1:9000"
    assert reachable("0.0.0.0:8000") == "127.0.0.1:8000"  # every address: this machine's
    assert reachable("[::]:8000") == "127.0.0.1:8000"
    assert reachable("8001") == "127.0.0.1:8001"  # runserver's port alone
    assert reachable("portal.internal:8000") == "portal.internal:8000"
