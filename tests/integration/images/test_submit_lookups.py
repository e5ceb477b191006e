"""What a submission asks registries (docs/containers.md, "At submission"): each distinct
image once per batch or workflow, all of it within one deadline, a tag's answer kept a few
seconds for the next submissions."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from django.core.cache import cache

from scheduling.models import ImageRegistry, Pool, Task
from scheduling.selectors import site_view_invalidate
from scheduling.services.image_lookups import MAX_MANIFEST_BYTES, Manifest, _cache_key
from tests.conftest import descriptor, submit

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture
def skopeo_calls(tmp_path, monkeypatch) -> Path:
    """The portal's skopeo, run through a wrapper that writes each call's arguments to the
    file this returns (the real skopeo answers)."""
    real = shutil.which("skopeo")
    if real is None:
        pytest.skip("skopeo is not installed")
    calls = tmp_path / "calls"
    calls.touch()
    wrapper = tmp_path / "bin" / "skopeo"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    return calls


def allow(settings, host: str) -> None:
    settings.SWITCHYARD_IMAGE_REGISTRY = host
    settings.SWITCHYARD_IMAGE_REGISTRIES = [host]
    ImageRegistry.objects.update_or_create(host=host, defaults={"any_image": True})
    Pool.objects.update(backend="local")
    site_view_invalidate()


@pytest.fixture
def silent_registry(settings, silent):
    """A registry that takes connections and never answers, allowed with any image."""
    allow(settings, silent)
    return silent


def batch(api, images: list[str]):
    docs = [descriptor(image=image, name=f"t{i}") for i, image in enumerate(images)]
    return api.post("/api/v1/tasks/batch/", {"tasks": docs}, format="json")


@pytest.mark.registry
def test_a_batch_asks_the_registry_once_per_distinct_image(api, settings, registry, skopeo_calls):
    allow(settings, registry)
    settings.SWITCHYARD_IMAGE_TAG_CACHE_S = 0
    response = batch(api, ["demo/tiny:1"] * 5 + ["demo/tiny:2"] * 3)
    assert response.status_code == 201, response.content
    asked = skopeo_calls.read_text().splitlines()
    assert len(asked) == 2, asked
    digests = {t.spec["image_digest"] for t in Task.objects.all()}
    assert len(digests) == 2


@pytest.mark.registry
def test_a_workflow_asks_the_registry_once_per_distinct_image(
    api, settings, registry, skopeo_calls
):
    allow(settings, registry)
    settings.SWITCHYARD_IMAGE_TAG_CACHE_S = 0
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "wf",
        "project": "materials",
        "tasks": [{"name": f"t{i}", "command": ["true"], "image": "demo/tiny:1"} for i in range(6)],
    }
    response = api.post("/api/v1/workflows/", doc, format="json")
    assert response.status_code == 201, response.content
    assert len(skopeo_calls.read_text().splitlines()) == 1


@pytest.mark.registry
def test_a_tags_answer_is_kept_a_few_seconds_for_the_next_submissions(
    api, settings, registry, skopeo_calls
):
    allow(settings, registry)
    settings.SWITCHYARD_IMAGE_TAG_CACHE_S = 30
    for _ in range(3):
        assert submit(api, descriptor(image="demo/tiny:1")).status_code == 201
    assert len(skopeo_calls.read_text().splitlines()) == 1
    settings.SWITCHYARD_IMAGE_TAG_CACHE_S = 0  # kept no more: asked every time
    for _ in range(2):
        assert submit(api, descriptor(image="demo/tiny:1")).status_code == 201
    assert len(skopeo_calls.read_text().splitlines()) == 3


@pytest.mark.registry
def test_only_a_manifests_digest_and_sizes_are_kept_and_a_huge_manifest_is_refused(
    api, settings, registry, build_image
):
    allow(settings, registry)
    settings.SWITCHYARD_IMAGE_TAG_CACHE_S = 30
    assert submit(api, descriptor(image="demo/tiny:1")).status_code == 201
    kept = cache.get(_cache_key(f"{registry}/demo/tiny:1"))
    assert isinstance(kept, Manifest), kept  # not the manifest's bytes
    assert kept.digest == Task.objects.get().spec["image_digest"] and kept.layer_bytes
    padding = {"pad": "x" * (MAX_MANIFEST_BYTES + 1)}
    huge = build_image.push("huge-manifest", annotations=padding)
    response = submit(api, descriptor(image=huge))
    assert response.status_code == 400, response.content
    error = response.json()["errors"][0]
    assert error["field"] == "image" and "manifest is at most 256 KiB" in error["message"], error
    assert cache.get(_cache_key(f"{registry}/{huge}")) is None
    assert Task.objects.count() == 1


def test_a_batch_on_a_silent_registry_is_refused_once_its_deadline_passes(
    api, settings, silent_registry
):
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed")
    settings.SWITCHYARD_IMAGE_RESOLVE_TIMEOUT_S = 10
    settings.SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S = 2
    started = time.monotonic()
    response = batch(api, [f"demo/tiny:{n}" for n in range(6)])
    took = time.monotonic() - started
    assert response.status_code == 503, response.content
    [error] = response.json()["errors"]
    assert error["field"] == "tasks[0].image" and error["got"] == "demo/tiny:0"
    assert "within 2s" in error["message"] and "try again" in error["message"]
    assert took < 6, took  # the deadline, not six registry timeouts
    assert not Task.objects.exists()


def test_a_workflow_on_a_silent_registry_is_refused_once_its_deadline_passes(
    api, settings, silent_registry
):
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed")
    settings.SWITCHYARD_IMAGE_RESOLVE_TIMEOUT_S = 10
    settings.SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S = 2
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "wf",
        "project": "materials",
        "tasks": [
            {"name": f"t{i}", "command": ["true"], "image": f"demo/tiny:{i}"} for i in range(4)
        ],
    }
    started = time.monotonic()
    response = api.post("/api/v1/workflows/", doc, format="json")
    assert response.status_code == 503, response.content
    assert response.json()["errors"][0]["field"] == "tasks[0].image"
    assert time.monotonic() - started < 6
    assert not Task.objects.exists()
