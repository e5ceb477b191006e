"""The local backend's tests share one way to build backends (`make`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduling.backends.local import LocalBackend
from scheduling.decisions.types import NodeView
from tests.unit.scheduling.test_local_backend import SMALL, finished


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
