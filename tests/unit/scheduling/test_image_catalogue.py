"""The image catalogue at submission, in GET /api/v1/images/, in the admin console and in the
configuration history (docs/containers.md, "Catalogue"). No registry here: every image these
tests accept is pinned to a digest on an image listed with any tag, so nothing asks one."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import ConfigVersion
from scheduling.models import CatalogueImage, ImageRegistry, Pool, Task
from scheduling.selectors import site_view_invalidate
from scheduling.sites.default import DEMO_REGISTRY
from tests.conftest import descriptor, submit

DIGEST = "sha256:" + "b" * 64
AGENT = {"type": "agent", "queue": "inference-agent"}


@pytest.fixture
def images(site, settings):
    """The demo catalogue; its registry one this portal reaches; pools on the local backend."""
    settings.SWITCHYARD_IMAGE_REGISTRY = DEMO_REGISTRY
    settings.SWITCHYARD_IMAGE_REGISTRIES = [DEMO_REGISTRY]
    Pool.objects.update(backend="local")
    site_view_invalidate()
    return ImageRegistry.objects.get(host=DEMO_REGISTRY)


def listed(registry, repository, **fields) -> CatalogueImage:
    fields.setdefault("family", "agent-runtime")
    image = CatalogueImage.objects.create(registry=registry, repository=repository, **fields)
    site_view_invalidate()
    return image


def error_of(response) -> dict:
    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]
    return error


def test_an_image_not_in_the_catalogue_is_refused_saying_what_is_allowed(api, images):
    error = error_of(submit(api, descriptor(image="demo/absent:1", **AGENT)))
    assert error["field"] == "image" and error["got"] == "demo/absent:1"
    assert f"{DEMO_REGISTRY}/demo/absent is not in it" in error["message"]
    assert f"{DEMO_REGISTRY}/switchyard/base:1" in error["message"]
    assert not Task.objects.exists()


def test_an_image_for_other_task_types_is_refused(api, images):
    doc = descriptor(image="switchyard/base:1", type="hpc-simulation", queue="hpc")
    error = error_of(submit(api, doc))
    assert "expected an image for hpc-simulation tasks" in error["message"]
    assert "is for agent, sandbox tasks" in error["message"]


def test_an_image_for_other_pools_is_refused(api, images):
    image = listed(images, "team/trainer", family="ai-training")
    image.pools.set([Pool.objects.get(name="gpu-train")])
    site_view_invalidate()
    error = error_of(submit(api, descriptor(image=f"team/trainer@{DIGEST}", **AGENT)))
    assert "expected an image pool inference-agent may run" in error["message"]


def test_a_retired_image_is_refused(api, images):
    CatalogueImage.objects.filter(repository="demo/tiny", tags=["1"]).update(state="retired")
    site_view_invalidate()
    doc = descriptor(image="demo/tiny:1", type="hpc-simulation", queue="hpc")
    error = error_of(submit(api, doc))
    assert (
        "expected an image in service" in error["message"]
        and "use demo/tiny:2" in (error["message"])
    )


def test_an_empty_catalogue_refuses_every_image(api, images):
    CatalogueImage.objects.all().delete()
    ImageRegistry.objects.all().delete()
    site_view_invalidate()
    error = error_of(submit(api, descriptor(image="demo/tiny:2", **AGENT)))
    assert "image catalogue allows no registry yet" in error["message"]


def test_a_deprecated_image_is_accepted_with_a_warning_event_on_the_task(api, images):
    listed(images, "team/old", state="deprecated", note="use team/new")
    response = submit(api, descriptor(image=f"team/old@{DIGEST}", **AGENT))
    assert response.status_code == 201, response.content
    detail = api.get(f"/api/v1/tasks/{response.json()['id']}/").json()
    messages = [e["message"] for e in detail["events"]]
    assert f"warning: image {DEMO_REGISTRY}/team/old (any tag) is deprecated: use team/new" in (
        messages
    )
    assert detail["spec"]["image_digest"] == DIGEST


def test_a_batch_records_the_warning_on_each_task(api, images):
    listed(images, "team/old", state="deprecated")
    doc = descriptor(image=f"team/old@{DIGEST}", **AGENT)
    response = api.post("/api/v1/tasks/batch/", {"tasks": [doc, doc]}, format="json")
    assert response.status_code == 201, response.content
    for pk in response.json()["ids"]:
        messages = Task.objects.get(pk=pk).events.values_list("message", flat=True)
        assert any(m.startswith("warning: image") for m in messages), list(messages)


def test_a_task_without_an_image_runs_on_the_host_when_no_default_is_set(api, images):
    response = submit(api, descriptor(**AGENT))
    assert response.status_code == 201
    task = Task.objects.get(pk=response.json()["id"])
    assert task.spec.get("image") is None
    assert not task.events.filter(message__startswith="warning").exists()


def test_a_default_image_applies_to_its_type_where_its_pool_runs_images(api, images):
    # Deprecated, retired since yesterday: the default is applied, then refused, so
    # no registry is asked here; that it is refused shows it was applied.
    yesterday = timezone.localdate() - timedelta(days=1)
    listed(
        images,
        "team/agent",
        tags=["5"],
        default_for=["agent"],
        state="deprecated",
        retire_on=yesterday,
    )
    error = error_of(submit(api, descriptor(**AGENT)))
    assert error["field"] == "image" and error["got"] == f"{DEMO_REGISTRY}/team/agent:5"
    assert error["message"].startswith(
        f"the default image of agent tasks, {DEMO_REGISTRY}/team/agent:5, cannot run"
    )
    # Other types keep running on the host.
    other = submit(api, descriptor(type="hpc-simulation", queue="hpc"))
    assert other.status_code == 201
    # A pool whose backend runs no images gets no default either.
    Pool.objects.update(backend="fake")
    site_view_invalidate()
    assert submit(api, descriptor(**AGENT)).status_code == 201


def test_the_images_api_lists_what_each_type_and_pool_may_use(api, images):
    CatalogueImage.objects.filter(repository="switchyard/python").update(state="retired")
    site_view_invalidate()
    found = api.get("/api/v1/images/").json()
    assert found["registries"] == [{"host": DEMO_REGISTRY, "any_image": False}]
    by_name = {(i["name"], tuple(i["tags"])): i for i in found["images"]}
    base = by_name[(f"{DEMO_REGISTRY}/switchyard/base", ("1",))]
    assert base["family"] == "sandbox-base" and base["task_types"] == ["agent", "sandbox"]
    assert base["uses"] == [
        {"type": "agent", "pools": ["inference-agent"]},
        {"type": "sandbox", "pools": ["inference-agent"]},
    ]
    old = by_name[(f"{DEMO_REGISTRY}/demo/tiny", ("1",))]
    assert old["deprecated"] and old["note"] == "use demo/tiny:2"
    assert (f"{DEMO_REGISTRY}/switchyard/python", ("3",)) not in by_name  # retired
    assert found["size_limits"] == {"cpu-hpc": None, "gpu-train": None, "inference-agent": None}
    hpc = api.get("/api/v1/images/?type=hpc-simulation").json()["images"]
    assert {i["repository"] for i in hpc} == {"demo/tiny", "demo/python"}
    gpu = api.get("/api/v1/images/?pool=gpu-train").json()
    assert {i["repository"] for i in gpu["images"]} == {"demo/python", "demo/tiny"}
    assert gpu["size_limits"] == {"gpu-train": None}


def test_the_images_api_refuses_unknown_filters_and_lists_nothing_where_no_pool_runs_images(
    api, site
):
    assert error_of(api.get("/api/v1/images/?type=gpu"))["field"] == "type"
    assert error_of(api.get("/api/v1/images/?pool=nope"))["field"] == "pool"
    assert api.get("/api/v1/images/").json()["images"] == []  # the fake backend runs none
    assert APIClient().get("/api/v1/images/").status_code in (401, 403)


def test_the_admin_console_refuses_a_second_entry_for_the_same_tag(images):
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    assert client.get("/admin/scheduling/catalogueimage/").status_code == 200
    response = client.post(
        "/admin/scheduling/catalogueimage/add/",
        {
            "registry": images.pk,
            "repository": "demo/tiny",
            "tags": json.dumps(["2"]),
            "family": "hpc-toolchain",
            "task_types": "[]",
            "default_for": "[]",
            "state": "active",
            "change_reason": "a second entry",
        },
    )
    assert response.status_code == 200  # the form again, with the error
    assert "already lists 2 of" in response.content.decode()


def test_a_rollback_of_a_catalogue_change_restores_what_was_allowed(api, images):
    image = CatalogueImage.objects.get(repository="switchyard/base")
    image.task_types = ["sandbox"]  # agents may no longer use it
    image.save()
    site_view_invalidate()
    error = error_of(submit(api, descriptor(image=f"switchyard/base:1@{DIGEST}", **AGENT)))
    assert "expected an image for agent tasks" in error["message"]
    created = ConfigVersion.objects.filter(model="scheduling.catalogueimage", object_id=image.pk)
    first = created.order_by("id").first()
    admin = APIClient()
    admin.force_authenticate(User.objects.get(username="admin"))
    response = admin.post(
        f"/api/v1/config/versions/{first.pk}/rollback/",
        data=json.dumps({"reason": "agents still need it"}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    image.refresh_from_db()
    assert image.task_types == ["agent", "sandbox"]
    site_view_invalidate()
    # Past the catalogue now; the tag and digest are checked by the registry, not here.
    listed_for_agents = api.get("/api/v1/images/?type=agent").json()["images"]
    assert "switchyard/base" in {i["repository"] for i in listed_for_agents}
