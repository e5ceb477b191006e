"""`make run`'s demo images (config/runtime/demo_images.py): the registry script's outcome
decides whether the portal is pointed at a registry; a failure never stops the portal, it
says why and leaves every image refused."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from config.runtime.demo_images import start_demo_registry


@pytest.fixture
def clean_env(monkeypatch, settings):
    settings.SWITCHYARD_IMAGE_REGISTRIES = []
    settings.SWITCHYARD_IMAGE_REGISTRY = ""
    for name in ("SWITCHYARD_IMAGE_REGISTRIES", "SWITCHYARD_IMAGE_REGISTRY"):
        monkeypatch.delenv(name, raising=False)


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "registry.sh"
    path.write_text("#!/bin/bash\n" + body + "\n")
    return path


def test_a_registry_that_does_not_start_leaves_images_refused_and_says_why(
    tmp_path, clean_env, settings
):
    out = io.StringIO()
    script = _script(tmp_path, 'echo "registry.sh: must run as root" >&2; exit 1')

    assert start_demo_registry(out, script=script) is None

    said = out.getvalue()
    assert "registry.sh: must run as root" in said
    assert f"WARNING: no demo images: {script} start exited 1" in said
    assert "every task's `image` is refused" in said
    assert settings.SWITCHYARD_IMAGE_REGISTRIES == []
    assert "SWITCHYARD_IMAGE_REGISTRIES" not in os.environ


def test_a_started_registry_is_what_the_portal_and_its_processes_use(tmp_path, clean_env, settings):
    out = io.StringIO()
    script = _script(
        tmp_path,
        'echo "registry.sh: registry running"; echo "export SWITCHYARD_TEST_REGISTRY=127.0.0.1:15123"',
    )

    assert start_demo_registry(out, script=script) == "127.0.0.1:15123"

    assert settings.SWITCHYARD_IMAGE_REGISTRIES == ["127.0.0.1:15123"]
    assert settings.SWITCHYARD_IMAGE_REGISTRY == "127.0.0.1:15123"
    assert os.environ["SWITCHYARD_IMAGE_REGISTRIES"] == "127.0.0.1:15123"
    assert "try `image: demo/python:3`" in out.getvalue()


def test_a_site_with_its_own_registries_starts_no_demo_registry(tmp_path, clean_env, settings):
    settings.SWITCHYARD_IMAGE_REGISTRIES = ["registry.example.org"]
    marker = tmp_path / "ran"
    out = io.StringIO()

    assert start_demo_registry(out, script=_script(tmp_path, f"touch {marker}")) is None

    assert not marker.exists()
    assert "this site's registries (registry.example.org)" in out.getvalue()
