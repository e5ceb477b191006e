"""Pre-pulling against the real test registry (docs/containers.md, "Pre-pulling"): the local
backend pulls a pool's warm images into its root's cache ahead of use and lists what the cache
holds; through the engine, the pass records it for the Capacity page, and a lease to a pool
with warm images takes effect once they are on its nodes."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling.engine.capacity import capacity_pass
from scheduling.engine.images import lease_prepull, prepull_pass
from scheduling.models import NodeImageCache, NodeLease, Pool, Queue
from scheduling.selectors import site_view, site_view_invalidate
from scheduling.services.capacity import open_lease

pytestmark = [pytest.mark.registry, pytest.mark.integration]


def test_the_local_backend_pulls_warm_images_once_and_lists_its_cache(registry, make):
    backend = make()
    image = f"{registry}/demo/python:3"

    first = backend.prepull([image], nodes=["n1"], timeout_s=300)
    again = backend.prepull([image], nodes=["n1"], timeout_s=300)
    missing = backend.prepull([f"{registry}/demo/tiny:404"], nodes=["n1"], timeout_s=60)

    assert first[image].ok and first[image].note.startswith("pulled sha256:"), first
    assert again[image].ok and again[image].note.startswith("cached (sha256:"), again
    [(ref, outcome)] = missing.items()
    assert not outcome.ok and "pulling failed" in outcome.note and "404" in outcome.note
    [cache] = backend.image_caches()
    assert cache.nodes == ("n1",)
    assert [i.reference for i in cache.images] == [image]
    assert cache.images[0].digest.startswith("sha256:") and cache.images[0].bytes > 1_000_000
    assert cache.pulls == 1 and cache.pulled_bytes == cache.images[0].pull_bytes > 0
    assert cache.cache_bytes >= cache.images[0].bytes


@pytest.fixture
def local_site(settings, registry, site):
    settings.SWITCHYARD_IMAGE_REGISTRY = registry
    settings.SWITCHYARD_IMAGE_REGISTRIES = [registry]
    Pool.objects.update(backend="local")
    site_view_invalidate()


@pytest.mark.django_db
def test_the_pass_and_a_lease_prepull_through_the_engine(local_site, registry):
    train = Pool.objects.get(name="gpu-train")
    train.warm_images = ["demo/python:3"]
    train.full_clean()
    train.save()

    assert prepull_pass() == {"images_ready": 1, "images_failed": 0}
    [cache] = NodeImageCache.objects.filter(backend="local")
    assert f"{registry}/demo/python:3" in [i["reference"] for i in cache.images]
    assert set(train.nodes.values_list("name", flat=True)) <= set(cache.nodes)

    lease = open_lease(
        pool=Pool.objects.get(name="inference-agent"),
        queue=Queue.objects.select_related("pool").get(name="training"),
        count=1,
        duration_s=3600,
    )
    [lent] = [n.name for n in lease.nodes.all()]
    site_view_invalidate()
    assert lent not in {n.name for n in site_view().pool_nodes["gpu-train"]}

    assert lease_prepull(lease.pk) == NodeLease.Prepull.DONE

    lease.refresh_from_db()
    assert lease.prepull_note.startswith(f"{registry}/demo/python:3: cached (sha256:")
    site_view_invalidate()
    assert lent in {n.name for n in site_view().pool_nodes["gpu-train"]}
    assert capacity_pass(timezone.now())["leases_applied"] == 1
