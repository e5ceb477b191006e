"""A task's `image` at submission, against the real test registry (docs/containers.md): the
site's registries decide what is allowed, the tag is resolved to a digest then and kept, and
what cannot run is refused naming the field."""

from __future__ import annotations

import dataclasses
import subprocess
import uuid

import pytest

from scheduling.backends.base import JobState
from scheduling.backends.local import LocalBackend
from scheduling.decisions.types import NodeView
from scheduling.models import ImageRegistry, Pool, Task
from scheduling.selectors import site_view_invalidate
from scheduling.services.images import backend_runs_images
from scheduling.spec import TaskSpec
from tests.conftest import descriptor, submit
from tests.unit.scheduling.local_backend.helpers import finished, request

pytestmark = [pytest.mark.registry, pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture
def images_allowed(settings, registry, site) -> str:
    """The test registry allowed and the site's default, its catalogue entry allowing any
    image of it (tests/integration/images/test_catalogue.py holds a listed catalogue to its
    list); every pool on the local backend."""
    settings.SWITCHYARD_IMAGE_REGISTRY = registry
    settings.SWITCHYARD_IMAGE_REGISTRIES = [registry]
    ImageRegistry.objects.update_or_create(host=registry, defaults={"any_image": True})
    Pool.objects.update(backend="local")
    site_view_invalidate()
    return registry


def digest_of(registry: str, name: str) -> str:
    out = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{registry}/{name}"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    import hashlib

    return "sha256:" + hashlib.sha256(out).hexdigest()


def tag(registry: str, source: str, target: str) -> None:
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            f"docker://{registry}/{source}",
            f"docker://{registry}/{target}",
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )


def only_error(response) -> dict:
    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]
    return error


def test_with_no_registry_configured_an_image_is_refused_saying_so(api, settings):
    settings.SWITCHYARD_IMAGE_REGISTRIES = []
    error = only_error(submit(api, descriptor(image="demo/tiny:1")))
    assert error["field"] == "image" and error["got"] == "demo/tiny:1"
    assert "no image registry configured" in error["message"]
    assert not Task.objects.exists()


def test_a_tag_is_resolved_at_submission_and_shown_with_its_digest(api, images_allowed):
    response = submit(api, descriptor(image="demo/tiny:1"))
    assert response.status_code == 201, response.content
    spec = api.get(f"/api/v1/tasks/{response.json()['id']}/").json()["spec"]
    assert spec["image"] == f"{images_allowed}/demo/tiny:1"
    assert spec["image_digest"] == digest_of(images_allowed, "demo/tiny:1")


def test_the_task_page_shows_the_reference_and_the_digest(api, browser, images_allowed):
    response = submit(api, descriptor(image="demo/tiny:2"))
    assert response.status_code == 201, response.content
    page = browser.get(f"/tasks/{response.json()['id']}/").content.decode()
    assert f"{images_allowed}/demo/tiny:2" in page
    assert digest_of(images_allowed, "demo/tiny:2") in page


def test_an_image_without_a_command_runs_its_own(api, images_allowed):
    doc = descriptor(image="demo/tiny:1")
    del doc["command"]
    assert submit(api, doc).status_code == 201


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("demo/absent:1", "is not in registry"),
        ("demo/tiny:404", "tag 404 of demo/tiny is not in registry"),
        ("registry.example.org/demo/tiny:1", "expected an image from"),
        ("Demo Tiny", "must be a container image"),
        ("demo/tiny:-1", "expected a tag"),
    ],
)
def test_what_cannot_be_run_is_refused_naming_the_field(api, images_allowed, image, says):
    error = only_error(submit(api, descriptor(image=image)))
    assert error["field"] == "image" and error["got"] == image
    assert says in error["message"], error
    assert not Task.objects.exists()


def test_a_pool_on_a_backend_that_runs_no_images_refuses_one(api, images_allowed, settings):
    Pool.objects.update(backend="fake")  # the in-memory fake backend runs no images
    site_view_invalidate()
    error = only_error(submit(api, descriptor(image="demo/tiny:1")))
    assert error["field"] == "image" and "does not run containers" in error["message"]
    # Both real backends run images (Slurm's nodes pull them in their Prolog).
    settings.COMPUTE_BACKENDS = {
        **settings.COMPUTE_BACKENDS,
        "slurm": {"BACKEND": "scheduling.backends.slurm.SlurmBackend", "OPTIONS": {}},
    }
    assert backend_runs_images("slurm") and backend_runs_images("local")
    assert not backend_runs_images("fake")


def test_a_tag_moved_after_submission_does_not_change_what_the_task_runs(
    api, images_allowed, job_root
):
    moving = f"demo/moving-{uuid.uuid4().hex[:8]}:latest"
    tag(images_allowed, "demo/tiny:1", moving)
    response = submit(api, descriptor(image=moving, command=None))
    assert response.status_code == 201, response.content
    submitted = Task.objects.get(pk=response.json()["id"])
    tag(images_allowed, "demo/tiny:2", moving)  # the tag now names version 2
    assert digest_of(images_allowed, moving) != submitted.spec["image_digest"]
    # Every attempt (a retry, a requeue) is built from the stored spec: still version 1.
    spec = TaskSpec.from_dict(Task.objects.get(pk=submitted.pk).spec)
    assert spec.image_digest == digest_of(images_allowed, "demo/tiny:1")
    backend = LocalBackend(
        "local-test",
        root=str(job_root / "root"),
        node_source=lambda alias: [NodeView(name="n1", cpus=4, memory_mib=4096)],
    )
    for attempt in ("try-1", "try-2"):
        req = request(attempt, None)
        backend.submit(dataclasses.replace(req, spec=dataclasses.replace(spec, name=attempt)))
        job = finished(backend, attempt, timeout=60)
        assert job.state is JobState.SUCCEEDED, (job.reason, backend.log(attempt))
        assert backend.log(attempt).split()[-1] == "1"


def test_in_a_workflow_the_refusal_names_the_tasks_field(api, images_allowed):
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "wf",
        "project": "materials",
        "tasks": [
            {"name": "a", "command": ["true"], "image": "demo/tiny:1"},
            {"name": "b", "command": ["true"], "image": "demo/tiny:404"},
        ],
    }
    response = api.post("/api/v1/workflows/", doc, format="json")
    error = only_error(response)
    assert error["field"] == "tasks[1].image" and error["got"] == "demo/tiny:404"
