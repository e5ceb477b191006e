"""Pre-pulling through the engine on the fake backend (docs/containers.md, "Pre-pulling"):
a pool's warm images are a versioned pool field, the periodic pass pulls them onto the pool's
nodes and records the caches for the pages, and a lease waits for its borrower's warm images
on the lent nodes, or for its timeout."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from portal.models import ConfigVersion
from scheduling.engine import get_backend
from scheduling.engine.capacity import capacity_pass
from scheduling.engine.images import lease_prepull, prepull_pass
from scheduling.models import Alert, NodeImageCache, NodeLease, Pool, Queue
from scheduling.selectors import site_view, site_view_invalidate
from scheduling.services.capacity import open_lease

pytestmark = pytest.mark.django_db

REGISTRY = "127.0.0.1:15000"


@pytest.fixture(autouse=True)
def registry(settings):
    settings.SWITCHYARD_IMAGE_REGISTRY = REGISTRY
    settings.SWITCHYARD_IMAGE_REGISTRIES = [REGISTRY]


def _warm(pool: str, *images: str) -> Pool:
    row = Pool.objects.get(name=pool)
    row.warm_images = list(images)
    row.full_clean()
    row.save()
    return row


def _lease() -> NodeLease:
    return open_lease(
        pool=Pool.objects.get(name="inference-agent"),
        queue=Queue.objects.select_related("pool").get(name="training"),
        count=1,
        duration_s=3600,
    )


def _training_nodes() -> set[str]:
    site_view_invalidate()
    return {n.name for n in site_view().pool_nodes["gpu-train"]}


def test_warm_images_are_checked_and_each_change_is_a_version(site):
    pool = _warm("gpu-train", "demo/python:3", f"{REGISTRY}/demo/tiny:2")
    version = (
        ConfigVersion.objects.filter(model="scheduling.pool", object_id=pool.pk)
        .order_by("-id")
        .first()
    )
    assert version is not None
    assert version.after["warm_images"] == ["demo/python:3", f"{REGISTRY}/demo/tiny:2"]
    for bad, said in (
        ("demo/python:3", "expected a list"),
        (["demo/tiny:-1"], "[0]: expected a tag"),
        (["demo/tiny:2", "demo/tiny:2"], "each image once"),
        ([f"img{i}" for i in range(21)], "at most 20"),
    ):
        pool.warm_images = bad
        with pytest.raises(ValidationError) as caught:
            pool.full_clean()
        assert said in str(caught.value.message_dict["warm_images"]), bad


def test_without_a_default_registry_a_warm_image_names_its_registry(site, settings):
    settings.SWITCHYARD_IMAGE_REGISTRY = ""
    settings.SWITCHYARD_IMAGE_REGISTRIES = []
    pool = Pool.objects.get(name="gpu-train")
    pool.warm_images = ["demo/python:3"]
    with pytest.raises(ValidationError, match="naming its registry"):
        pool.full_clean()
    pool.warm_images = [f"{REGISTRY}/demo/python:3"]
    pool.full_clean()


def test_the_pass_pulls_each_pools_warm_images_onto_its_nodes_and_records_the_caches(site):
    _warm("gpu-train", "demo/python:3")
    result = prepull_pass()
    nodes = sorted(Pool.objects.get(name="gpu-train").nodes.values_list("name", flat=True))
    assert result == {"images_ready": 1, "images_failed": 0}
    calls = [c for c in get_backend("fake").calls if c[0] == "prepull"]
    assert calls == [("prepull", ((f"{REGISTRY}/demo/python:3",), tuple(nodes)))]
    recorded = {tuple(c.nodes): c for c in NodeImageCache.objects.filter(backend="fake")}
    assert sorted(n for (n,) in recorded) == nodes
    assert recorded[(nodes[0],)].images[0]["reference"] == f"{REGISTRY}/demo/python:3"


def test_a_lease_waits_for_the_borrowers_warm_images_on_its_nodes(site):
    _warm("gpu-train", "demo/python:3")
    lease = _lease()
    [lent] = [n.name for n in lease.nodes.all()]
    assert lease.prepull == NodeLease.Prepull.WAITING
    # Waiting: the nodes do not serve the borrower yet, and the backend is not told.
    assert lent not in _training_nodes()
    assert capacity_pass(timezone.now())["leases_applied"] == 0
    assert not [c for c in get_backend("fake").calls if c[0] == "apply_lease"]

    assert lease_prepull(lease.pk) == NodeLease.Prepull.DONE

    lease.refresh_from_db()
    assert lease.prepull == NodeLease.Prepull.DONE
    assert "demo/python:3: pulled" in lease.prepull_note
    prepulls = [c for c in get_backend("fake").calls if c[0] == "prepull"]
    assert prepulls == [("prepull", ((f"{REGISTRY}/demo/python:3",), (lent,)))]
    assert lent in _training_nodes()
    assert capacity_pass(timezone.now())["leases_applied"] == 1
    assert lease_prepull(lease.pk) == "not waiting"  # a redelivery pulls nothing again


def test_a_lease_without_warm_images_starts_at_once(site):
    lease = _lease()
    assert lease.prepull == NodeLease.Prepull.NONE
    assert capacity_pass(timezone.now())["leases_applied"] == 1


def test_a_lease_whose_prepull_does_not_finish_in_time_starts_anyway_with_an_alert(site, settings):
    settings.SWITCHYARD_LEASE_PREPULL_TIMEOUT_S = 60
    _warm("gpu-train", "demo/python:3")
    lease = _lease()
    [lent] = [n.name for n in lease.nodes.all()]
    assert capacity_pass(timezone.now())["leases_prepull_timed_out"] == 0

    result = capacity_pass(lease.starts_at + timedelta(seconds=61))

    assert (result["leases_prepull_timed_out"], result["leases_applied"]) == (1, 1)
    lease.refresh_from_db()
    assert lease.prepull == NodeLease.Prepull.TIMED_OUT
    alert = Alert.objects.get(kind=Alert.Kind.LEASE)
    assert alert.subject == f"lease #{lease.pk} started before its images were pulled"
    assert lent in _training_nodes()
    # The pull that finishes late changes nothing of the lease.
    assert lease_prepull(lease.pk) == "not waiting"


def test_an_image_that_cannot_be_pulled_starts_the_lease_with_an_alert(site):
    _warm("gpu-train", "demo/python:3", "demo/absent:1")
    get_backend("fake")._cluster("fake").unpullable.add(f"{REGISTRY}/demo/absent:1")
    lease = _lease()

    assert lease_prepull(lease.pk) == NodeLease.Prepull.FAILED

    lease.refresh_from_db()
    assert "demo/absent:1: pulling failed" in lease.prepull_note
    assert Alert.objects.filter(
        kind=Alert.Kind.LEASE, subject=f"lease #{lease.pk}: not every warm image was pulled"
    ).exists()
    assert capacity_pass(timezone.now())["leases_applied"] == 1


def test_the_capacity_page_and_the_dashboard_show_the_recorded_caches(site):
    _warm("gpu-train", "demo/python:3")
    prepull_pass()
    node = Pool.objects.get(name="gpu-train").nodes.order_by("name").first()
    assert node is not None
    client = Client()
    client.force_login(User.objects.filter(is_superuser=True).first())

    page = client.get("/capacity/").content.decode()
    dashboard = client.get("/dashboard/site/").content.decode()

    section = page[page.index('id="image-caches"') :]
    assert f"{REGISTRY}/demo/python:3" in section
    assert "000000000000" in section  # the digest, short
    assert node.name in section
    caches = dashboard[dashboard.index('id="dashboard-image-caches"') :]
    assert node.name in caches and "1000\u00a0bytes" in caches
