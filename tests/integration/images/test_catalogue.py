"""The image catalogue at submission, against the real test registry (docs/containers.md,
"Catalogue"): the demo catalogue lists the registry's images, and what it does not allow is
refused naming the field; a deprecated image is taken with a warning; a rollback of the
catalogue gives back what it allowed."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal.models import ConfigVersion
from scheduling.models import CatalogueImage, ImageRegistry, Pool, Task
from scheduling.selectors import site_view_invalidate
from tests.conftest import descriptor, submit
from tests.integration.images.test_submit import digest_of, only_error

pytestmark = [pytest.mark.registry, pytest.mark.integration, pytest.mark.django_db]

AGENT = {"type": "agent", "queue": "inference-agent"}
HPC = {"type": "hpc-simulation", "queue": "hpc"}


@pytest.fixture
def catalogue(settings, registry, site) -> ImageRegistry:
    """The demo catalogue on the test registry, held to its list (no image of the registry
    beyond it); the registry reachable, also as localhost (which the catalogue does not
    list); every pool on the local backend."""
    settings.SWITCHYARD_IMAGE_REGISTRY = registry
    port = registry.rpartition(":")[2]
    settings.SWITCHYARD_IMAGE_REGISTRIES = [registry, f"localhost:{port}"]
    found = ImageRegistry.objects.get()
    if found.host != registry:  # the registry runs on another port than the demo's
        found.host = registry
        found.save()
    Pool.objects.update(backend="local")
    site_view_invalidate()
    return found


def test_an_image_the_catalogue_does_not_list_is_refused(api, catalogue, registry):
    error = only_error(submit(api, descriptor(image="demo/absent:1", **AGENT)))
    assert error["field"] == "image" and error["got"] == "demo/absent:1"
    assert f"{registry}/demo/absent is not in it" in error["message"]
    assert "allowed for agent tasks on pool inference-agent: " in error["message"]
    assert f"{registry}/switchyard/base:1" in error["message"]
    assert f"{registry}/demo/tiny:1 (deprecated)" in error["message"]
    assert not Task.objects.exists()


def test_a_registry_the_catalogue_does_not_allow_is_refused(api, catalogue, registry):
    port = registry.rpartition(":")[2]
    image = f"localhost:{port}/demo/tiny:2"  # the same registry, by a name not listed
    error = only_error(submit(api, descriptor(image=image, **HPC)))
    assert error["field"] == "image" and error["got"] == image
    assert (
        f"expected an image from {registry} (the registries of this site's image catalogue)"
        in (error["message"])
    )


def test_a_listed_tag_the_registry_does_not_have_is_refused(api, catalogue, registry):
    CatalogueImage.objects.create(
        registry=catalogue, repository="demo/tiny", tags=["404"], family="hpc-toolchain"
    )
    site_view_invalidate()
    error = only_error(submit(api, descriptor(image="demo/tiny:404", **HPC)))
    assert error["field"] == "image"
    assert error["message"] == (
        f"expected an image that exists: tag 404 of demo/tiny is not in registry {registry}"
    )


def test_an_unlisted_tag_is_refused_naming_the_listed_ones(api, catalogue):
    error = only_error(submit(api, descriptor(image="demo/tiny:3", **HPC)))
    assert "the catalogue lists (1, 2), not tag 3" in error["message"]


def test_a_deprecated_image_runs_with_a_warning_on_the_task(api, catalogue, registry):
    response = submit(api, descriptor(image="demo/tiny:1", **HPC))
    assert response.status_code == 201, response.content
    detail = api.get(f"/api/v1/tasks/{response.json()['id']}/").json()
    assert detail["spec"]["image_digest"] == digest_of(registry, "demo/tiny:1")
    warnings = [e["message"] for e in detail["events"] if e["message"].startswith("warning")]
    assert warnings == [f"warning: image {registry}/demo/tiny:1 is deprecated: use demo/tiny:2"]
    fresh = submit(api, descriptor(image="demo/tiny:2", **HPC)).json()["id"]
    assert not Task.objects.get(pk=fresh).events.filter(message__startswith="warning").exists()


def test_a_digest_must_be_the_one_its_listed_tag_names(api, catalogue, registry):
    one = digest_of(registry, "demo/tiny:1")
    error = only_error(submit(api, descriptor(image=f"demo/tiny:2@{one}", **HPC)))
    assert "expected no digest, or the one tag 2 names now" in error["message"]
    two = digest_of(registry, "demo/tiny:2")
    assert submit(api, descriptor(image=f"demo/tiny:2@{two}", **HPC)).status_code == 201


def test_a_types_default_image_is_resolved_for_a_task_that_names_none(api, catalogue, registry):
    base = CatalogueImage.objects.get(repository="switchyard/base")
    base.default_for = ["agent"]
    base.save()
    site_view_invalidate()
    task = Task.objects.get(pk=submit(api, descriptor(**AGENT)).json()["id"])
    assert task.spec["image"] == f"{registry}/switchyard/base:1"
    assert task.spec["image_digest"] == digest_of(registry, "switchyard/base:1")
    hpc = Task.objects.get(pk=submit(api, descriptor(**HPC)).json()["id"])
    assert hpc.spec.get("image") is None  # no default for its type: the host's software


def test_a_pools_size_limit_refuses_a_larger_image(api, catalogue, registry):
    Pool.objects.filter(name="inference-agent").update(max_image_bytes=1000)
    site_view_invalidate()
    error = only_error(submit(api, descriptor(image="switchyard/python:3", **AGENT)))
    assert error["message"].startswith(
        "expected an image of at most 1,000 bytes on pool inference-agent (its layers, "
        "compressed); this one is "
    )
    # Pinned by digest, the manifest is fetched by digest to size it.
    pinned = f"switchyard/python:3@{digest_of(registry, 'switchyard/python:3')}"
    assert (
        "at most 1,000 bytes"
        in only_error(submit(api, descriptor(image=pinned, **AGENT)))["message"]
    )
    Pool.objects.filter(name="inference-agent").update(max_image_bytes=1 << 30)
    site_view_invalidate()
    assert submit(api, descriptor(image="switchyard/python:3", **AGENT)).status_code == 201


def test_a_rollback_of_the_catalogue_restores_what_it_allowed(api, catalogue):
    assert submit(api, descriptor(image="demo/tiny:2", **HPC)).status_code == 201
    entry = CatalogueImage.objects.get(repository="demo/tiny", tags=["2"])
    entry_id = entry.pk
    entry.delete()
    site_view_invalidate()
    error = only_error(submit(api, descriptor(image="demo/tiny:2", **HPC)))
    assert "the catalogue lists (1), not tag 2" in error["message"]
    created = ConfigVersion.objects.filter(
        model="scheduling.catalogueimage", object_id=entry_id
    ).order_by("id")
    assert [v.action for v in created][-1] == "delete"
    admin = APIClient()
    admin.force_authenticate(User.objects.get(username="admin"))
    response = admin.post(
        f"/api/v1/config/versions/{created.first().pk}/rollback/",
        data=json.dumps({"reason": "deleted the wrong tag"}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert CatalogueImage.objects.get(pk=entry_id).tags == ["2"]
    site_view_invalidate()
    assert submit(api, descriptor(image="demo/tiny:2", **HPC)).status_code == 201
