"""The local backend's tests share one way to build backends (`make`); the storage tests
the demo site's areas in a folder of their own (`areas`); the capacity tests a pool of one
inference node (`one_inference_node`)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from portal.models import ClusterAccount
from scheduling.backends.local import LocalBackend
from scheduling.decisions.types import NodeView
from scheduling.engine.storage import prepare_user
from scheduling.models import Node, Pool
from scheduling.selectors import site_view_invalidate
from tests.conftest import move_storage_areas
from tests.gpufake import nvidia_smi  # noqa: F401 - a fixture (NVIDIA's tool, recorded)
from tests.unit.scheduling.local_backend.helpers import SMALL, finished


@pytest.fixture
def make(job_root: Path) -> Iterator[Callable[..., LocalBackend]]:
    """Build backends on one root; at teardown cancel whatever still runs."""
    made: list[LocalBackend] = []

    def _make(nodes: list[NodeView] | None = None, **options) -> LocalBackend:
        inventory = list(nodes if nodes is not None else [SMALL])
        options.setdefault("kill_grace_s", 0.5)
        backend = LocalBackend(
            "local-test",
            root=str(job_root / "root"),
            node_source=lambda alias: inventory,
            **options,
        )
        made.append(backend)
        return backend

    yield _make
    for backend in made:
        jobs_dir = Path(backend.root) / "jobs"
        keys = [p.name for p in jobs_dir.iterdir()] if jobs_dir.exists() else []
        for key in keys:
            backend.cancel(key)
        for key in keys:
            finished(backend, key)


@pytest.fixture
def areas(site) -> Iterator[Path]:
    """The demo site's areas, moved to a fresh folder; every pool on the local backend;
    alice and bob mapped to accounts of their own."""
    root = Path(settings.VAR_DIR) / "storage-tests" / uuid.uuid4().hex[:10]
    move_storage_areas(root)
    Pool.objects.update(backend="local")
    for name in ("alice", "bob"):
        ClusterAccount.objects.create(
            user=User.objects.get(username=name), unix_username=f"sy-{name}"
        )
    site_view_invalidate()
    for name in ("alice", "bob"):  # what a worker does when they first open Files
        prepare_user(User.objects.get(username=name).pk)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def one_inference_node(site, settings):
    """The inference pool shrunk to inf001 (4 GPUs); preemption considered at once."""
    settings.SWITCHYARD_PREEMPT_AFTER_S = 0
    Node.objects.filter(pool__name="inference-agent").exclude(name="inf001").update(
        state=Node.State.DRAINED
    )
    site_view_invalidate()
