"""The configuration history as people read it: models by name, related objects by name, and
"undo this change" (docs/console.md, "Configuration history")."""

from __future__ import annotations

import html
import json

from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from portal import audit
from portal.history_display import named
from portal.models import ConfigVersion
from scheduling.models import Queue, RoutingRule


def _page(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def _limit(limit: int, reason: str) -> ConfigVersion:
    api = APIClient()
    api.force_authenticate(User.objects.get(username="quinn"))
    response = api.patch(
        "/api/v1/queues/hpc/",
        data=json.dumps({"max_concurrency": limit, "reason": reason}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    return ConfigVersion.objects.first()


def _text(response) -> str:
    return html.unescape(response.content.decode())


def test_the_filter_and_the_list_name_models_as_people_do(site):
    _limit(12, "fewer jobs")
    page = _text(_page("admin").get("/config/"))
    assert '<option value="scheduling.classifiersettings">Classifier settings</option>' in page
    assert '<option value="scheduling.queue">Queue</option>' in page
    assert ">scheduling.classifiersettings<" not in page
    assert '<span class="muted">Queue</span> hpc' in page
    assert "undo this change" in page
    filtered = _text(_page("admin").get("/config/?model=scheduling.queue"))
    assert '<option value="scheduling.queue" selected>Queue</option>' in filtered


def test_a_diff_names_related_objects(site):
    rule = RoutingRule.objects.exclude(queue__name="hpc").first()
    was = rule.queue.name
    hpc = Queue.objects.get(name="hpc")
    rule.queue = hpc
    with audit.because("move it"):
        rule.save()
    version = ConfigVersion.objects.first()
    assert (version.before["queue"], version.after["queue"]) == (
        Queue.objects.get(name=was).pk,
        hpc.pk,
    )
    page = _text(_page("admin").get(f"/config/{version.pk}/"))
    assert f'<td class="old"><code>{was}</code></td><td class="new"><code>hpc</code></td>' in page
    assert "Routing rule" in page


def test_a_diff_names_a_deleted_related_object_as_such(site):
    rows = named("scheduling.routingrule", [("queue", 999999, None), ("order", 1, 2)])
    assert rows == [("queue", "#999999 (deleted)", None), ("order", 1, 2)]
    admins = named("scheduling.queue", [("admins", [], [User.objects.get(username="quinn").pk])])
    assert admins == [("admins", "(none)", "quinn")]


def test_undo_restores_the_previous_values_and_is_a_version_with_its_reason(site):
    first = _limit(10, "ten")
    second = _limit(20, "twenty")
    admin = _page("admin")
    page = _text(admin.get(f"/config/{second.pk}/"))
    assert 'id="undo"' in page and "Undo this change" in page
    assert '<td class="old"><code>20</code></td><td class="new"><code>10</code></td>' in page
    refused = _text(admin.post(f"/config/{second.pk}/undo/", {"reason": " "}, follow=True))
    assert "reason: say why you undo it" in refused
    assert Queue.objects.get(name="hpc").max_concurrency == 20
    done = admin.post(f"/config/{second.pk}/undo/", {"reason": "too many at once"})
    assert done.status_code == 302
    assert Queue.objects.get(name="hpc").max_concurrency == 10
    undo = ConfigVersion.objects.first()
    assert (undo.action, undo.restores_id, undo.author_name) == ("rollback", first.pk, "admin")
    assert undo.reason == f"undo v{second.pk}: too many at once"
    assert done["Location"] == f"/config/{undo.pk}/"
    again = _text(admin.post(f"/config/{second.pk}/undo/", {"reason": "twice"}, follow=True))
    assert f"cannot undo v{second.pk}: it is already as v{first.pk} left it" in again
    assert ConfigVersion.objects.first().pk == undo.pk


def test_undoing_a_creation_deletes_it_and_undoing_the_deletion_brings_it_back(site):
    hpc = Queue.objects.get(name="hpc")
    made = _page("admin").post(
        "/admin/scheduling/routingrule/add/",
        {"order": 77, "match_type": "sandbox", "queue": hpc.pk, "enabled": "on"}
        | {"change_reason": "try sandboxes on hpc"},
    )
    assert made.status_code == 302
    created = ConfigVersion.objects.first()
    assert created.action == "create"
    admin = _page("admin")
    assert admin.post(f"/config/{created.pk}/undo/", {"reason": "not yet"}).status_code == 302
    assert not RoutingRule.objects.filter(order=77).exists()
    deleted = ConfigVersion.objects.first()
    assert (deleted.action, deleted.reason) == ("delete", f"undo v{created.pk}: not yet")
    assert admin.post(f"/config/{deleted.pk}/undo/", {"reason": "now"}).status_code == 302
    back = RoutingRule.objects.get(order=77)
    assert (back.pk, back.queue_id, back.match_type) == (created.object_id, hpc.pk, "sandbox")


def test_what_cannot_be_undone_says_why_and_only_a_platform_admin_undoes(site):
    hpc = Queue.objects.get(name="hpc")
    [rule] = RoutingRule.objects.bulk_create([RoutingRule(order=88, queue=hpc)])  # no signals
    rule.enabled = not rule.enabled
    with audit.because("flip"):
        rule.save()  # a rule older than its history: its state as found is recorded first
    same = ConfigVersion.objects.filter(object_id=rule.pk, model="scheduling.routingrule")
    baseline, _ = same.order_by("id")
    assert baseline.reason == "as it was before its first recorded change"
    page = _text(_page("admin").get(f"/config/{baseline.pk}/"))
    assert "It cannot be undone: " in page and "not a change" in page
    refused = _text(
        _page("admin").post(f"/config/{baseline.pk}/undo/", {"reason": "x"}, follow=True)
    )
    assert f"cannot undo v{baseline.pk}: v{baseline.pk} is how it was found" in refused
    quinn = _page("quinn")
    hpc_change = _limit(5, "five")
    assert "Undo this change" not in _text(quinn.get(f"/config/{hpc_change.pk}/"))
    assert quinn.post(f"/config/{hpc_change.pk}/undo/", {"reason": "x"}).status_code == 404
    assert Queue.objects.get(name="hpc").max_concurrency == 5


def test_the_api_undoes_a_change_for_platform_admins_only(site):
    first = _limit(10, "ten")
    second = _limit(20, "twenty")
    url = f"/api/v1/config/versions/{second.pk}/undo/"
    for username, refused in (("quinn", 403), ("alice", 404)):
        client = APIClient()
        client.force_authenticate(User.objects.get(username=username))
        assert client.post(url, {"reason": "x"}, format="json").status_code == refused
    admin = APIClient()
    admin.force_authenticate(User.objects.get(username="admin"))
    missing = admin.post(url, {}, format="json")
    assert missing.status_code == 400 and missing.json()["errors"][0]["field"] == "reason"
    done = admin.post(url, {"reason": "too many"}, format="json")
    assert done.status_code == 201, done.content
    assert (done.json()["restores"], done.json()["reason"]) == (
        first.pk,
        f"undo v{second.pk}: too many",
    )
    assert Queue.objects.get(name="hpc").max_concurrency == 10
    again = admin.post(url, {"reason": "twice"}, format="json")
    assert again.status_code == 409
    assert again.json()["errors"][0] == {
        "field": "version",
        "message": f"cannot undo v{second.pk}: it is already as v{first.pk} left it",
        "got": None,
    }
