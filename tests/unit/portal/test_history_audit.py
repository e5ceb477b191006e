"""Configuration history with rollback, and the audit log's rows for every kind of act."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.test import Client
from rest_framework.test import APIClient

from portal.models import AuditEvent, ConfigVersion
from scheduling.models import Node, Queue, RoutingRule, Task
from tests.conftest import descriptor, submit


def _api(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def _page(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def _rows(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def test_a_queue_change_is_a_version_with_author_reason_and_diff(site):
    quinn = _api("quinn")
    response = quinn.patch(
        "/api/v1/queues/hpc/",
        data=json.dumps({"max_concurrency": 12, "reason": "fewer jobs during the upgrade"}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    version = ConfigVersion.objects.first()
    assert (version.model, version.action, version.author_name) == (
        "scheduling.queue",
        "update",
        "quinn",
    )
    assert version.reason == "fewer jobs during the upgrade"
    listed = quinn.get("/api/v1/config/versions/?model=scheduling.queue").json()["results"][0]
    assert listed["changes"] == [{"field": "max_concurrency", "before": None, "after": 12}]
    page = _page("quinn").get(f"/config/{version.pk}/").content.decode()
    assert "max_concurrency" in page and "fewer jobs during the upgrade" in page
    row = _rows("config.change")[-1]
    assert (row.actor, row.queue, row.detail["version"]) == ("quinn", "hpc", version.pk)


def test_bad_queue_settings_are_refused_by_field_and_change_nothing(site):
    before = ConfigVersion.objects.count()
    response = _api("quinn").patch(
        "/api/v1/queues/hpc/",
        data=json.dumps({"cpu_oversubscription": 0, "task_types": ["nope"], "reason": "x"}),
        content_type="application/json",
    )
    assert response.status_code == 400
    fields = {e["field"] for e in response.json()["errors"]}
    assert fields == {"cpu_oversubscription", "task_types"}
    no_reason = _api("quinn").patch(
        "/api/v1/queues/hpc/",
        data=json.dumps({"max_concurrency": 3}),
        content_type="application/json",
    )
    assert no_reason.status_code == 400 and no_reason.json()["errors"][0]["field"] == "reason"
    assert ConfigVersion.objects.count() == before


def test_roll_back_to_any_version_is_itself_a_version(site):
    queue = Queue.objects.get(name="hpc")
    admin = _page("admin")
    for limit in (10, 20):
        _api("admin").patch(
            "/api/v1/queues/hpc/",
            data=json.dumps({"max_concurrency": limit, "reason": f"try {limit}"}),
            content_type="application/json",
        )
    first = ConfigVersion.objects.filter(model="scheduling.queue", object_id=queue.pk).order_by(
        "id"
    )
    target = first.get(after__max_concurrency=10)
    response = admin.post(f"/config/{target.pk}/rollback/", {"reason": "20 was too many"})
    assert response.status_code == 302
    queue.refresh_from_db()
    assert queue.max_concurrency == 10
    latest = ConfigVersion.objects.first()
    assert (latest.action, latest.restores_id, latest.author_name) == (
        "rollback",
        target.pk,
        "admin",
    )
    assert latest.before["max_concurrency"] == 20 and latest.after["max_concurrency"] == 10
    assert _rows("config.rollback")[-1].detail["version"] == latest.pk
    # rolling back to where it already is changes nothing and says so
    again = _api("admin").post(
        f"/api/v1/config/versions/{target.pk}/rollback/",
        data=json.dumps({"reason": "again"}),
        content_type="application/json",
    )
    assert again.status_code == 400 and "already" in again.json()["errors"][0]["message"]


def test_a_deleted_rule_comes_back_with_its_id_and_a_node_keeps_its_state(site):
    rule = RoutingRule.objects.order_by("order").first()
    rule_id, queue_id = rule.pk, rule.queue_id
    rule.delete()
    created = ConfigVersion.objects.filter(model="scheduling.routingrule", object_id=rule_id)
    assert created.first().action == "delete"
    made = _api("admin").post(
        f"/api/v1/config/versions/{created.order_by('id').first().pk}/rollback/",
        data=json.dumps({"reason": "deleted by mistake"}),
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    assert RoutingRule.objects.get(pk=rule_id).queue_id == queue_id
    # a node's configuration rolls back; its drained state (operations, not config) stays
    node = Node.objects.filter(pool__name="cpu-hpc").first()
    original = ConfigVersion.objects.filter(model="scheduling.node", object_id=node.pk).first()
    node.switch = "sw-9"
    node.save()
    Node.objects.filter(pk=node.pk).update(state="drained")
    response = _api("admin").post(
        f"/api/v1/config/versions/{original.pk}/rollback/",
        data=json.dumps({"reason": "wrong switch"}),
        content_type="application/json",
    )
    assert response.status_code == 201
    node.refresh_from_db()
    assert (node.switch, node.state) == (original.after["switch"], "drained")


def test_history_records_changes_made_anywhere_even_the_admin_console(site):
    admin = _page("admin")
    queue = Queue.objects.get(name="training")
    rule = RoutingRule.objects.filter(queue=queue).first()
    response = admin.post(
        f"/admin/scheduling/routingrule/{rule.pk}/change/",
        {
            "order": rule.order,
            "match_type": rule.match_type,
            "queue": queue.pk,
            "enabled": "",
            "change_reason": "training pauses",
        },
    )
    assert response.status_code == 302, response.content[:500]
    version = ConfigVersion.objects.first()
    assert (version.model, version.author_name) == ("scheduling.routingrule", "admin")
    assert version.reason == "training pauses"
    assert {f for f, *_ in version_diff(version)} == {"enabled"}


def version_diff(version):
    from portal import history

    return history.diff(version.before, version.after)


def test_the_audit_log_has_a_row_for_every_act(site, settings):
    alice, quinn, admin = _api("alice"), _api("quinn"), _api("admin")
    made = submit(alice, descriptor(type="hpc-simulation", queue="hpc"))
    task = Task.objects.get(pk=made.json()["id"])
    asked = alice.post(
        "/api/v1/priority-requests/",
        data=json.dumps({"task": task.pk, "level": "high", "reason": "deadline", "until": "2h"}),
        content_type="application/json",
    )
    assert asked.status_code == 201, asked.content
    asked = asked.json()
    quinn.post(f"/api/v1/priority-requests/{asked['id']}/reject/", data={}, format="json")
    alice.post(f"/api/v1/tasks/{task.pk}/cancel/")
    node = Node.objects.filter(pool__name="cpu-hpc").first()
    quinn.post(f"/api/v1/nodes/{node.name}/drained/", data={"reason": "fan"}, format="json")
    quinn.post(f"/api/v1/nodes/{node.name}/up/", data={}, format="json")
    admin.put(
        "/api/v1/projects/materials/quotas/",
        data={"queue": "hpc", "resource": "cpus", "limit": 256, "reason": "grant"},
        format="json",
    )
    alice.post("/api/v1/projects/materials/members/", data={"username": "bob"}, format="json")
    lent = admin.post(
        "/api/v1/leases/",
        data={"pool": "inference-agent", "queue": "training", "count": 1, "until": "1h"},
        format="json",
    )
    assert lent.status_code == 201, lent.content
    APIClient().post(
        "/api/v1/auth/token/", data={"username": "alice", "password": "wrong"}, format="json"
    )
    Client().post("/login/", {"username": "nobody", "password": "wrong"})

    seen = {(e.action, e.actor) for e in AuditEvent.objects.all()}
    for expected in [
        ("task.submit", "alice"),
        ("priority.request", "alice"),
        ("priority.reject", "quinn"),
        ("task.cancel", "alice"),
        ("node.drained", "quinn"),
        ("node.up", "quinn"),
        ("quota.set", "admin"),
        ("member.add", "alice"),
        ("lease.open", "admin"),
        ("login.failed", "alice"),
        ("login.failed", "nobody"),
    ]:
        assert expected in seen, expected
    drained = _rows("node.drained")[-1]
    assert drained.target == f"node {node.name}" and drained.detail["reason"] == "fan"
    assert all(e.actor_id is None for e in _rows("login.failed"))
    # the page and the API filter the same rows
    filtered = admin.get("/api/v1/audit/?action=node.drained").json()["results"]
    assert [r["target"] for r in filtered] == [f"node {node.name}"]
    page = _page("admin").get("/audit/?actor=quinn", HTTP_HX_REQUEST="true").content.decode()
    assert "Node drained" in page and "Task submitted" not in page  # the rows fragment
    bad = admin.get("/api/v1/audit/?since=yesterday")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "since"


def test_the_audit_log_is_append_only(site):
    _api("alice").post("/api/v1/tasks/", data=descriptor(), format="json")
    row = AuditEvent.objects.first()
    with pytest.raises(ValueError):
        row.save()
    with pytest.raises(ValueError):
        row.delete()
    with pytest.raises(ValueError):
        AuditEvent.objects.filter(pk=row.pk).update(actor="mallory")
    with pytest.raises(ValueError):
        AuditEvent.objects.filter(pk=row.pk).delete()
    if connection.vendor == "postgresql":  # the database itself refuses, whoever asks
        for sql in (
            "UPDATE portal_auditevent SET actor = 'mallory' WHERE id = %s",
            "DELETE FROM portal_auditevent WHERE id = %s",
        ):
            with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as c:
                c.execute(sql, [row.pk])
    assert AuditEvent.objects.get(pk=row.pk).actor == "alice"


def test_an_object_older_than_its_history_keeps_its_first_state(site):
    queue = Queue.objects.get(name="hpc")
    ConfigVersion.objects.filter(model="scheduling.queue", object_id=queue.pk).delete()
    Queue.objects.filter(pk=queue.pk).update(max_concurrency=5)  # no signal: as if before
    _api("quinn").patch(
        "/api/v1/queues/hpc/",
        data=json.dumps({"max_concurrency": 9, "reason": "more"}),
        content_type="application/json",
    )
    first, change = ConfigVersion.objects.filter(
        model="scheduling.queue", object_id=queue.pk
    ).order_by("id")
    assert first.after["max_concurrency"] == 5 and first.reason.startswith("as it was")
    assert (change.before["max_concurrency"], change.after["max_concurrency"]) == (5, 9)
    made = _api("admin").post(
        f"/api/v1/config/versions/{first.pk}/rollback/",
        data=json.dumps({"reason": "back"}),
        content_type="application/json",
    )
    assert made.status_code == 201
    assert Queue.objects.get(pk=queue.pk).max_concurrency == 5


def test_a_rollback_never_deletes_what_hangs_on_the_object(site):
    queue = Queue.objects.create(name="scratch", pool=Queue.objects.get(name="hpc").pool)
    created = ConfigVersion.objects.filter(model="scheduling.queue", object_id=queue.pk).get()
    RoutingRule.objects.create(order=99, queue=queue)
    # roll "back" to before it existed is a delete: refused while a rule routes to it
    deleted_version = ConfigVersion.objects.create(
        model="scheduling.queue",
        object_id=queue.pk,
        object_repr="scratch",
        action="delete",
        before=created.after,
        after=None,
    )
    refused = _api("admin").post(
        f"/api/v1/config/versions/{deleted_version.pk}/rollback/",
        data=json.dumps({"reason": "gone"}),
        content_type="application/json",
    )
    assert refused.status_code == 409
    assert "routing rule" in refused.json()["errors"][0]["message"]
    assert Queue.objects.filter(pk=queue.pk).exists() and RoutingRule.objects.filter(order=99)
