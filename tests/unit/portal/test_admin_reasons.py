"""The admin console asks why for every change to a versioned model, and the history keeps
the reason with the version, as it does for the console pages (docs/console.md)."""

from __future__ import annotations

import re

from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client

from portal import history
from portal.admin_reason import VersionedAdmin
from portal.models import ConfigVersion
from scheduling.models import Queue, RoutingRule, StorageArea


def _admin() -> Client:
    page = Client()
    page.force_login(User.objects.get(username="admin"))
    return page


def _rule_form(rule: RoutingRule, **changes) -> dict:
    form = {"order": rule.order, "match_type": rule.match_type, "queue": rule.queue_id}
    form |= {"min_gpus": rule.min_gpus or "", "min_cpus": rule.min_cpus or ""}
    form |= {"enabled": "on" if rule.enabled else ""}
    return {**form, **changes}


def _field_errors(html: str) -> list[str]:
    return re.findall(r'class="errorlist[^"]*"[^>]*>\s*<li>([^<]*)</li>', html)


def test_every_versioned_model_s_admin_asks_for_a_reason_and_offers_no_bulk_delete(site, rf):
    request = rf.get("/admin/")
    request.user = User.objects.get(username="admin")
    versioned = [apps.get_model(label) for label in history.TRACKED]
    for model in versioned:
        model_admin = admin.site._registry.get(model)
        assert model_admin is not None, f"{model._meta.label_lower} has no admin"
        assert isinstance(model_admin, VersionedAdmin), model._meta.label_lower
        assert "delete_selected" not in model_admin.get_actions(request)
        assert "change_reason" in model_admin.get_form(request)().fields


def test_a_change_without_a_reason_is_refused_with_a_field_error_and_saves_nothing(site):
    rule = RoutingRule.objects.filter(enabled=True).first()
    versions = ConfigVersion.objects.count()
    url = f"/admin/scheduling/routingrule/{rule.pk}/change/"
    form = _admin().get(url).content.decode()
    assert "Reason for this change" in form and 'name="change_reason"' in form
    refused = _admin().post(url, _rule_form(rule, enabled=""))
    assert refused.status_code == 200
    html = refused.content.decode()
    assert _field_errors(html) == ["Say why you make this change: it is kept in the history."]
    rule.refresh_from_db()
    assert rule.enabled is True
    assert ConfigVersion.objects.count() == versions


def test_a_change_with_a_reason_is_a_version_that_carries_it(site):
    rule = RoutingRule.objects.filter(enabled=True).first()
    url = f"/admin/scheduling/routingrule/{rule.pk}/change/"
    done = _admin().post(url, _rule_form(rule, enabled="", change_reason=" pool upgrade "))
    assert done.status_code == 302, _field_errors(done.content.decode())
    version = ConfigVersion.objects.first()
    assert (version.model, version.object_id, version.action) == (
        "scheduling.routingrule",
        rule.pk,
        "update",
    )
    assert (version.author_name, version.reason) == ("admin", "pool upgrade")
    assert history.diff(version.before, version.after) == [("enabled", True, False)]


def test_an_object_added_in_the_console_carries_its_reason(site):
    queue = Queue.objects.get(name="hpc")
    form = {"order": 99, "match_type": "hpc-simulation", "queue": queue.pk, "enabled": "on"}
    refused = _admin().post("/admin/scheduling/routingrule/add/", form)
    assert refused.status_code == 200 and not RoutingRule.objects.filter(order=99).exists()
    done = _admin().post(
        "/admin/scheduling/routingrule/add/", {**form, "change_reason": "a rule for the new pool"}
    )
    assert done.status_code == 302, _field_errors(done.content.decode())
    made = RoutingRule.objects.get(order=99)
    version = ConfigVersion.objects.first()
    assert (version.object_id, version.action, version.reason) == (
        made.pk,
        "create",
        "a rule for the new pool",
    )


def test_a_deletion_asks_for_a_reason_on_its_confirmation(site):
    rule = RoutingRule.objects.order_by("-order").first()
    url = f"/admin/scheduling/routingrule/{rule.pk}/delete/"
    confirmation = _admin().get(url).content.decode()
    assert 'name="change_reason"' in confirmation
    for data in ({"post": "yes", "change_reason": "  "}, {"anything": "1"}):
        refused = _admin().post(url, data)  # Django deletes on any non-empty POST
        assert refused.status_code == 200
        assert "Say why you make this change" in refused.content.decode()
        assert RoutingRule.objects.filter(pk=rule.pk).exists()
    done = _admin().post(url, {"post": "yes", "change_reason": "the old GPU rule"})
    assert done.status_code == 302
    assert not RoutingRule.objects.filter(pk=rule.pk).exists()
    version = ConfigVersion.objects.first()
    assert (version.object_id, version.action, version.reason) == (
        rule.pk,
        "delete",
        "the old GPU rule",
    )


def _changelist_form(html: str) -> dict:
    """The list's editable rows as they are, ready to post back."""
    data = dict(
        re.findall(r'name="(form-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"[^>]*value="(\d*)"', html)
    )
    for index, pk in re.findall(r'name="form-(\d+)-id"[^>]*value="(\d+)"', html):
        data[f"form-{index}-id"] = pk
        if RoutingRule.objects.get(pk=pk).enabled:
            data[f"form-{index}-enabled"] = "on"
    return {**data, "_save": "Save"}


def test_editable_columns_of_a_list_are_saved_only_with_a_reason(site):
    page = _admin()
    listing = page.get("/admin/scheduling/routingrule/").content.decode()
    assert 'name="change_reason"' in listing
    data = _changelist_form(listing)
    first = RoutingRule.objects.get(pk=data["form-0-id"])
    data.pop("form-0-enabled", None) if first.enabled else data.update({"form-0-enabled": "on"})
    versions = ConfigVersion.objects.count()
    refused = page.post("/admin/scheduling/routingrule/", data, follow=True)
    assert "Reason for this change" in refused.content.decode()
    assert "Nothing was saved" in refused.content.decode()
    assert ConfigVersion.objects.count() == versions
    assert RoutingRule.objects.get(pk=first.pk).enabled == first.enabled
    done = page.post("/admin/scheduling/routingrule/", {**data, "change_reason": "night test"})
    assert done.status_code == 302
    assert RoutingRule.objects.get(pk=first.pk).enabled != first.enabled
    version = ConfigVersion.objects.first()
    assert (version.object_id, version.reason) == (first.pk, "night test")


def test_many_to_many_fields_saved_after_the_form_carry_the_reason_too(site):
    area = StorageArea.objects.filter(pools__isnull=False).distinct().first()
    kept = list(area.pools.values_list("pk", flat=True))[:1]
    form = {
        "name": area.name,
        "path": area.path,
        "owner": area.owner,
        "read_only": "on" if area.read_only else "",
        "pools": kept,
        "quota_bytes": area.quota_bytes or "",
        "retention_days": area.retention_days or "",
        "change_reason": "one pool mounts it now",
    }
    latest = ConfigVersion.objects.first().pk
    done = _admin().post(f"/admin/scheduling/storagearea/{area.pk}/change/", form)
    assert done.status_code == 302, _field_errors(done.content.decode())
    made = ConfigVersion.objects.filter(pk__gt=latest, model="scheduling.storagearea")
    assert [v.after["pools"] for v in made] == [kept]
    assert {v.reason for v in made} == {"one pool mounts it now"}
