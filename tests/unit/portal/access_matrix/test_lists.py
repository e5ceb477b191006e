"""The access matrix: lists show nothing that is not yours."""

from __future__ import annotations

from portal.models import AuditEvent
from scheduling.models import Queue
from tests.unit.portal.access_matrix.helpers import (
    _clients,
)


def test_lists_show_nothing_that_is_not_yours(world):
    bob_api, rita_api = _clients("other")[1], _clients("member")[1]
    assert world.task_m.pk not in [t["id"] for t in bob_api.get("/api/v1/tasks/").json()["results"]]
    assert world.task_g.pk not in [
        t["id"] for t in rita_api.get("/api/v1/tasks/").json()["results"]
    ]
    quinn_page, quinn_api = _clients("queue_admin")
    seen = [t["id"] for t in quinn_api.get("/api/v1/tasks/").json()["results"]]
    assert world.task_m.pk in seen and world.task_g.pk not in seen
    # config versions: a queue admin's are their queues' only
    versions = quinn_api.get("/api/v1/config/versions/").json()["results"]
    hpc = Queue.objects.get(name="hpc").pk
    assert versions and {(v["model"], v["object_id"]) for v in versions} == {
        ("scheduling.queue", hpc)
    }
    # the audit log: a researcher reads their own rows only
    rows = rita_api.get("/api/v1/audit/").json()["results"]
    assert all(r["actor"] == "rita" for r in rows)
    assert AuditEvent.objects.exclude(actor="rita").exists()
    # the usage page's project filter offers only your projects
    assert b"genomics" not in _clients("member")[0].get("/usage/").content
    # leases: a researcher and finance see none; a queue admin those of their queues' pools
    for role in ("member", "other", "finance"):
        assert _clients(role)[1].get("/api/v1/leases/").json()["results"] == []
    seen = {row["id"] for row in quinn_api.get("/api/v1/leases/").json()["results"]}
    assert seen == {world.lease_hpc.pk}
    # simulations: a queue admin's list has no replay of the whole site
    listing = quinn_page.get("/simulations/").content.decode()
    assert f'id="simulation-{world.replay_hpc.pk}"' in listing
    assert f'id="simulation-{world.replay_site.pk}"' not in listing
    # a queue admin's capacity page lists their pool's nodes only
    content = quinn_page.get("/capacity/").content.decode()
    assert world.node_hpc.name in content and world.node_gpu.name not in content
