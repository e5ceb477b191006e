"""Pre-pulling on the localhost Slurm cluster (docs/containers.md, "Pre-pulling"): a pull job
pinned to a node, whose Prolog pulls the image into that node's cache as the cache's account;
an image already there costs no job; a lease waits for its borrower's warm images. Needs the
cluster (docker/slurm/cluster.sh) and the registry (`make registry-up`)."""

from __future__ import annotations

import uuid

import pytest

from scheduling.backends.images.readonly import ReadOnlyCache
from scheduling.backends.images.skopeo import Skopeo
from scheduling.decisions.images import parse_image_ref
from scheduling.engine import get_backend
from scheduling.engine.images import lease_prepull
from scheduling.models import NodeLease, Pool, Queue
from scheduling.selectors import site_view, site_view_invalidate
from scheduling.services.capacity import open_lease
from tests.integration.images.conftest import build_image, registry  # noqa: F401 (fixtures)
from tests.integration.slurm.conftest import STATE_DIR

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm,
    pytest.mark.registry,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def slurm(slurm, settings):
    """The test's Slurm backend, which sees the nodes' caches where the cluster keeps them."""
    config = settings.COMPUTE_BACKENDS["slurm"]
    options = {**config["OPTIONS"], "node_image_cache": f"{STATE_DIR}/images/{{node}}"}
    settings.COMPUTE_BACKENDS = {
        **settings.COMPUTE_BACKENDS,
        "slurm": {**config, "OPTIONS": options},
    }
    return get_backend("slurm")


def fresh_image(registry: str, build_image) -> str:  # noqa: F811
    """An image no node's cache can hold yet (its one file is new)."""
    ref = build_image.push("warm", entries=[("file", "/etc/warm", uuid.uuid4().hex)])
    return f"{registry}/{ref}"


def digest_of(ref: str) -> str:
    return Skopeo(timeout_s=30).digest(parse_image_ref(ref, default_registry="localhost"))


def pull_jobs(slurm) -> int:
    """The pull jobs this backend submitted (an sbatch retried after making the Slurm
    account names the same job)."""
    names = {a for argv in slurm.run.calls if argv[0].endswith("sbatch") for a in argv}
    return len({a for a in names if a.startswith("--job-name=prepull-")})


def node_cache(node: str) -> ReadOnlyCache:
    return ReadOnlyCache(STATE_DIR / "images" / node)


def test_a_warm_image_lands_in_one_nodes_cache_once(site, slurm, registry, build_image):  # noqa: F811
    ref = fresh_image(registry, build_image)
    digest = digest_of(ref)
    nodes = sorted(n.name for n in slurm.nodes() if n.available)
    node, other = nodes[0], nodes[-1]
    jobs = pull_jobs(slurm)

    first = slurm.prepull([ref], nodes=[node], timeout_s=240)

    assert first[ref].ok and first[ref].note.startswith("pulled sha256:"), first
    assert pull_jobs(slurm) == jobs + 1  # one pull job
    image = node_cache(node).get(digest)
    assert image is not None and (image.rootfs / "etc" / "warm").is_file()
    assert node_cache(other).get(digest) is None  # only the node asked
    # Its files are gone once the job is over: the workdir holds no pull job's.
    assert not [p for p in slurm.workdir.iterdir() if "prepull-" in p.name]
    [view] = [v for v in slurm.image_caches() if v.nodes == (node,)]
    assert ref in [i.reference for i in view.images]

    again = slurm.prepull([ref], nodes=[node], timeout_s=60)

    assert again[ref].ok and again[ref].note == f"cached ({digest[:19]})", again
    assert pull_jobs(slurm) == jobs + 1  # no job: the cache said so

    # Where the portal cannot see the node's cache: what its pull jobs said within the hour,
    # else a pull job, whose Prolog finds the image there.
    slurm.node_image_cache = None
    try:
        remembered = slurm.prepull([ref], nodes=[node], timeout_s=60)
        assert pull_jobs(slurm) == jobs + 1
        slurm._pulled_at().clear()
        blind = slurm.prepull([ref], nodes=[node], timeout_s=120)
        assert slurm.image_caches() == []
    finally:
        slurm.node_image_cache = f"{STATE_DIR}/images/{{node}}"
    assert remembered[ref].ok and remembered[ref].note.startswith("pre-pulled 0 min ago")
    assert blind[ref].ok and blind[ref].note == f"cached ({digest[:19]})", blind
    assert pull_jobs(slurm) == jobs + 2


def test_a_missing_image_fails_with_its_reason_and_drains_nothing(
    site,
    slurm,
    registry,  # noqa: F811
):
    node = sorted(n.name for n in slurm.nodes() if n.available)[0]
    tag = f"{registry}/demo/tiny:404"
    missing = slurm.prepull([tag], nodes=[node], timeout_s=60)
    assert not missing[tag].ok and "404" in missing[tag].note, missing

    # By a digest the registry does not have: the portal asks nothing, the node's pull fails.
    pinned = f"{registry}/demo/tiny@sha256:{'0' * 64}"
    failed = slurm.prepull([pinned], nodes=[node], timeout_s=120)
    assert not failed[pinned].ok and "pulling image" in failed[pinned].note, failed
    # A registry's answer is never the node's fault: it is not drained.
    assert node in {n.name for n in slurm.nodes() if n.available}


def test_a_lease_on_slurm_waits_for_its_borrowers_warm_images(
    site,
    slurm,
    settings,
    registry,  # noqa: F811
    build_image,  # noqa: F811
):
    settings.SWITCHYARD_IMAGE_REGISTRY = registry
    settings.SWITCHYARD_IMAGE_REGISTRIES = [registry]
    ref = fresh_image(registry, build_image)
    train = Pool.objects.get(name="gpu-train")
    train.warm_images = [ref]
    train.full_clean()
    train.save()
    lease = open_lease(
        pool=Pool.objects.get(name="inference-agent"),
        queue=Queue.objects.select_related("pool").get(name="training"),
        count=1,
        duration_s=3600,
    )
    [lent] = [n.name for n in lease.nodes.all()]
    assert lease.prepull == NodeLease.Prepull.WAITING
    site_view_invalidate()
    assert lent not in {n.name for n in site_view().pool_nodes["gpu-train"]}

    assert lease_prepull(lease.pk) == NodeLease.Prepull.DONE

    lease.refresh_from_db()
    assert lease.prepull_note.startswith(f"{ref}: pulled sha256:"), lease.prepull_note
    assert node_cache(lent).get(digest_of(ref)) is not None
    site_view_invalidate()
    assert lent in {n.name for n in site_view().pool_nodes["gpu-train"]}
