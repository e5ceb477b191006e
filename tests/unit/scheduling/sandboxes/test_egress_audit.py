"""A sandbox's egress audit on the fake backend: kept once, bounded, when it ends; read from
the backend while it is live; its project's members' only (docs/sandbox-network.md)."""

from __future__ import annotations

import pytest

from scheduling.backends.base import BackendError
from scheduling.backends.fake import FakeBackend
from scheduling.engine import sandbox_egress
from scheduling.engine import sandboxes as door
from scheduling.engine.registry import get_backend
from scheduling.models import Queue, SandboxEgress, Task
from scheduling.selectors import site_view_invalidate
from tests.unit.scheduling.sandboxes.helpers import create

pytestmark = pytest.mark.django_db

LISTED = "pypi.example.org:443"


def _record(n: int, *, allowed: bool = True, **fields) -> dict:
    record = {
        "time": f"2026-12-05T10:{n // 60 % 60:02d}:{n % 60:02d}.000+00:00",
        "method": "CONNECT",
        "url": LISTED,
        "target": LISTED,
        "decision": "allowed" if allowed else "refused",
    }
    if not allowed:
        record["reason"] = "not on the allow-list"
    return record | fields


@pytest.fixture
def with_egress(api):
    Queue.objects.filter(name="inference-agent").update(egress_allow=[LISTED])
    site_view_invalidate()
    made = create(api, network={"allow": [LISTED]})
    assert made.status_code == 201, made.content
    sid = made.json()["id"]
    task = Task.objects.get(sandbox__public_id=sid)
    return sid, task, get_backend(task.backend)


def test_live_it_is_read_from_the_backend_and_kept_once_when_it_ends(api, with_egress):
    sid, task, backend = with_egress
    backend.set_egress_audit(task.backend_id, [_record(1), _record(2, allowed=False)])
    live = api.get(f"/api/v1/sandboxes/{sid}/egress/").json()["results"]
    assert [(r["target"], r["allowed"], r["reason"]) for r in live] == [
        (LISTED, False, "not on the allow-list"),  # newest first
        (LISTED, True, ""),
    ]
    assert not SandboxEgress.objects.exists()
    api.delete(f"/api/v1/sandboxes/{sid}/")
    assert SandboxEgress.objects.count() == 2
    backend.set_egress_audit(task.backend_id, [])  # the job's folder is gone
    kept = api.get(f"/api/v1/sandboxes/{sid}/egress/").json()["results"]
    assert kept == live
    door.after_ends([task])  # the hook again (a redelivered message): nothing twice
    assert SandboxEgress.objects.count() == 2


def test_what_is_kept_is_bounded_and_hostile_text_cut(api, with_egress):
    sid, task, backend = with_egress
    many = [_record(n) for n in range(sandbox_egress.KEPT + 5)]
    hostile = _record(9999 % 3600, method="X" * 100, target="h\x00" * 200, reason="r" * 999)
    backend.set_egress_audit(task.backend_id, [*many, {"time": "Feb 31", "method": "GET"}, hostile])
    api.delete(f"/api/v1/sandboxes/{sid}/")
    rows = SandboxEgress.objects.filter(sandbox__public_id=sid)
    assert rows.count() == sandbox_egress.KEPT  # the newest
    last = rows.order_by("-id").first()
    assert (len(last.method), len(last.target), "\x00" in last.target) == (16, 255, False)
    assert len(last.reason) == 255 and last.allowed
    assert not rows.filter(at__minute=0, at__second__lt=5).exists()  # the oldest five went


def test_a_backend_that_cannot_say_leaves_the_end_to_go_on(api, with_egress, monkeypatch):
    sid, task, backend = with_egress

    def refuse(self, backend_id, *, limit_bytes=0):
        raise BackendError("unreachable")

    monkeypatch.setattr(FakeBackend, "egress_audit", refuse)
    ended = api.delete(f"/api/v1/sandboxes/{sid}/")
    assert ended.json()["state"] == "ended"
    assert api.get(f"/api/v1/sandboxes/{sid}/egress/").json() == {"results": []}


def test_a_sandbox_without_network_asks_no_backend(api):
    sid = create(api).json()["id"]
    assert api.get(f"/api/v1/sandboxes/{sid}/egress/").json() == {"results": []}
    task = Task.objects.get(sandbox__public_id=sid)
    api.delete(f"/api/v1/sandboxes/{sid}/")
    assert "egress_audit" not in [m for m, _ in get_backend(task.backend).calls]


def test_another_project_gets_404(api, outsider_api, with_egress):
    sid, task, backend = with_egress
    assert outsider_api.get(f"/api/v1/sandboxes/{sid}/egress/").status_code == 404
    assert (
        outsider_api.get("/api/v1/sandboxes/sbx-000000000000000000000000/egress/").status_code
        == 404
    )
    api.delete(f"/api/v1/sandboxes/{sid}/")
    assert outsider_api.get(f"/api/v1/sandboxes/{sid}/egress/").status_code == 404
