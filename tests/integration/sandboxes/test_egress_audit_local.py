"""A live sandbox's egress audit on the real local backend (bubblewrap, the agent, the
session's tinyproxy): the API and the page show the requests its proxy allowed and refused,
live from the proxy's log and, once it has ended, as kept in the database, after its job
folder is gone (docs/sandbox-network.md)."""

from __future__ import annotations

import os
import time

import pytest
from rest_framework.test import APIClient

from scheduling.backends.session import egress
from scheduling.engine.registry import get_backend
from scheduling.models import Queue, SandboxEgress, Task
from scheduling.selectors import site_view_invalidate
from tests.servers import need
from tests.unit.scheduling.egress.helpers import GREETING, http_server
from tests.unit.scheduling.sandboxes.helpers import create, run
from tests.unit.scheduling.sessions.test_local_egress import FETCH

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def api(site, researcher) -> APIClient:
    client = APIClient()
    client.force_authenticate(researcher)
    return client


@pytest.fixture
def outsider_api(site, outsider) -> APIClient:
    client = APIClient()
    client.force_authenticate(outsider)
    return client


def _decisions(answer) -> list[tuple[str, str, bool, str]]:
    assert answer.status_code == 200, answer.content
    rows = answer.json()["results"]
    return [(r["method"], r["target"], r["allowed"], r["reason"]) for r in reversed(rows)]


def test_the_audit_shows_allowed_and_refused_requests_live_and_after_the_job_folder_is_gone(
    api, outsider_api, browser, outsider_browser
):
    need("tinyproxy", egress.find("tinyproxy"))
    with http_server(GREETING) as allowed, http_server("other") as other:
        listed = f"localhost:{allowed}"
        Queue.objects.filter(name="inference-agent").update(egress_allow=[listed])
        site_view_invalidate()
        made = create(api, network={"allow": [listed]})
        assert made.status_code == 201, made.content
        sid = made.json()["id"]
        fetched = run(
            api,
            sid,
            ["python3", "-I", "-c", FETCH, f"http://{listed}/", f"http://localhost:{other}/"],
        )
    lines = fetched.json()["stdout"].splitlines()
    assert lines[0].startswith(f"http://{listed}/ {GREETING}"), lines
    assert lines[1] == f"http://localhost:{other}/ 403", lines
    expected = [
        ("GET", listed, True, ""),
        ("GET", f"localhost:{other}", False, "not on the allow-list"),
    ]
    assert _decisions(api.get(f"/api/v1/sandboxes/{sid}/egress/")) == expected  # live
    assert not SandboxEgress.objects.filter(sandbox__public_id=sid).exists()

    assert api.delete(f"/api/v1/sandboxes/{sid}/").json()["state"] == "ended"
    task = Task.objects.get(sandbox__public_id=sid)
    backend = get_backend(task.backend)
    jobdir = backend.store.jobdir(task.backend_id)
    # What retention does to an ended job's folder, hours later; here at once, while the
    # session's last processes may still be writing in it: once more until it is gone.
    deadline = time.monotonic() + 15
    while True:
        backend.store.archive(task.backend_id)
        if not os.path.exists(jobdir) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not os.path.exists(jobdir)
    assert backend.egress_audit(task.backend_id) == []  # the log went with it

    assert _decisions(api.get(f"/api/v1/sandboxes/{sid}/egress/")) == expected  # as kept
    page = browser.get(f"/sandboxes/{sid}/").content.decode()
    network = page[page.index('id="sandbox-network"') :]
    assert network.index(f"<code>{listed}</code>") < network.index(
        f"<code>localhost:{other}</code>"
    )
    assert "<strong>refused</strong>: not on the allow-list" in network
    assert network.count('class="egress-allowed"') == 1
    assert network.count('class="egress-refused"') == 1

    assert outsider_api.get(f"/api/v1/sandboxes/{sid}/egress/").status_code == 404
    assert outsider_browser.get(f"/sandboxes/{sid}/").status_code == 404
