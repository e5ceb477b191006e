"""Canary rule sets: a share of submissions by new rules, their results beside the current
rules', then promote (through the versioned models) or abandon."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal.models import AuditEvent, ConfigVersion
from scheduling.decisions.canary import CanaryError, in_canary, parse_rule_set
from scheduling.engine.levels import relevel
from scheduling.models import Canary, LevelRule, RoutingRule, Task
from scheduling.selectors import site_view_invalidate
from scheduling.selectors.canary import canary_results
from scheduling.services.canary import current_rule_set
from tests.conftest import descriptor, submit


def _admin() -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="admin"))
    return client


def _start(rule_set: dict, share: int, name: str = "agents low") -> dict:
    response = _admin().post(
        "/api/v1/canaries/",
        data=json.dumps({"name": name, "share_percent": share, "reason": "try", **rule_set}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    site_view_invalidate()
    return response.json()


def _agents_start_low(rule_set: dict) -> dict:
    levels = [r for r in rule_set["level_rules"] if r["task_type"] != "agent"]
    levels.append({"task_type": "agent", "queue": None, "start_level": 0, "step": 0})
    return {**rule_set, "level_rules": levels}


def test_bad_rule_sets_are_refused_by_path():
    with pytest.raises(CanaryError) as caught:
        parse_rule_set(
            {
                "routing_rules": [{"order": 1, "queue": "nowhere"}, {"queue": "hpc", "x": 1}],
                "level_rules": [{"task_type": "agent", "step": 1}],
            },
            queues=["hpc"],
            task_types=["agent"],
        )
    fields = {f for f, _, _ in caught.value.errors}
    assert fields == {
        "routing_rules[0].queue",
        "routing_rules[1].x",
        "routing_rules[1].order",
        "level_rules[0].every_s",
    }
    assert in_canary(0.29, 30) and not in_canary(0.30, 30) and not in_canary(0.0, 0)


def test_a_canary_takes_its_share_and_its_tasks_follow_its_rules(site, api):
    current = current_rule_set()
    canary = _start(_agents_start_low(current), 30)
    made = api.post(
        "/api/v1/tasks/batch/",
        data=json.dumps({"tasks": [descriptor(name=f"a{i}", type="agent") for i in range(400)]}),
        content_type="application/json",
    )
    assert made.status_code == 201
    tasks = Task.objects.filter(pk__in=made.json()["ids"])
    taken = tasks.filter(canary_id=canary["id"])
    assert 0.22 < taken.count() / 400 < 0.38  # 30 % ± 4 standard deviations
    assert set(taken.values_list("level", flat=True)) == {0}
    assert 0 not in set(tasks.filter(canary__isnull=True).values_list("level", flat=True))
    assert all("(canary #" in t.routing_reason for t in taken[:5])
    relevel()  # the policy pass keeps each task on its own rules
    assert set(Task.objects.filter(canary_id=canary["id"]).values_list("level", flat=True)) == {0}

    rows = {r["arm"]: r for r in canary_results(Canary.objects.get(pk=canary["id"]))}
    assert rows["canary: agents low"]["tasks"] == taken.count()
    assert rows["current rules"]["tasks"] == 400 - taken.count()
    assert rows["current rules"]["queues"] == [("inference-agent", 400 - taken.count())]
    page = _admin_page().get("/config/canary/").content.decode()
    assert "canary: agents low" in page and "current rules" in page


def _admin_page():
    from django.test import Client

    client = Client()
    client.force_login(User.objects.get(username="admin"))
    return client


def test_promote_makes_them_the_sites_rules_and_history_can_undo_it(site, api):
    current = current_rule_set()
    new = _agents_start_low(current)
    new["routing_rules"] = [r for r in new["routing_rules"] if r["match_type"] != "sandbox"]
    canary = _start(new, 100)
    assert (
        _admin()
        .post(
            "/api/v1/canaries/",
            data=json.dumps({"name": "two", "share_percent": 5, **new}),
            content_type="application/json",
        )
        .status_code
        == 409
    )
    promoted = _admin().post(
        f"/api/v1/canaries/{canary['id']}/promote/",
        data=json.dumps({"reason": "agents fine low"}),
        content_type="application/json",
    )
    assert promoted.status_code == 200 and promoted.json()["state"] == "promoted"
    assert RoutingRule.objects.count() == len(new["routing_rules"])
    assert LevelRule.objects.get(task_type="agent", queue=None).start_level == 0
    versions = ConfigVersion.objects.filter(reason="agents fine low")
    assert versions.filter(model="scheduling.routingrule", action="delete").exists()
    assert versions.filter(model="scheduling.levelrule", action="create").exists()
    assert AuditEvent.objects.filter(action="canary.promote").exists()
    site_view_invalidate()
    task = Task.objects.get(pk=submit(api, descriptor(type="agent")).json()["id"])
    assert task.canary_id is None and task.level == 0  # the site's own rules now


def test_abandon_and_who_may(site):
    canary = _start(current_rule_set(), 50)
    researcher = APIClient()
    researcher.force_authenticate(User.objects.get(username="alice"))
    assert researcher.get("/api/v1/canaries/").status_code == 404
    assert researcher.post(f"/api/v1/canaries/{canary['id']}/abandon/").status_code == 404
    from django.test import Client

    quinn = Client()
    quinn.force_login(User.objects.get(username="quinn"))
    assert quinn.get("/config/canary/").status_code == 404
    done = _admin().post(f"/api/v1/canaries/{canary['id']}/abandon/")
    assert done.json()["state"] == "abandoned"
    assert Canary.objects.filter(state="active").count() == 0
    bad = _admin().post(
        "/api/v1/canaries/",
        data=json.dumps({"name": "", "share_percent": 0, "routing_rules": []}),
        content_type="application/json",
    )
    assert bad.status_code == 400
    assert {e["field"] for e in bad.json()["errors"]} == {"name", "share_percent", "routing_rules"}


def test_a_rule_without_its_level_is_refused_at_the_start(site):
    rule_set = current_rule_set()
    rule_set["level_rules"] = [{"task_type": "agent", "start_level": None, "step": None}]
    bad = _admin().post(
        "/api/v1/canaries/",
        data=json.dumps({"name": "nulls", "share_percent": 10, **rule_set}),
        content_type="application/json",
    )
    assert bad.status_code == 400
    assert {e["field"] for e in bad.json()["errors"]} == {
        "level_rules[0].start_level",
        "level_rules[0].step",
    }
