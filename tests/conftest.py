from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from scheduling.selectors import site_view_invalidate

ROOT = Path(__file__).resolve().parent.parent


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(autouse=True)
def _backends(settings, tmp_path_factory):
    """Every test gets a fresh local-backend root and the in-memory fake backend."""
    root = tmp_path_factory.mktemp("local-backend")
    # Seeding hashes five demo passwords per test; the real hasher makes that seconds.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.COMPUTE_BACKENDS = {
        "local": {
            "BACKEND": "scheduling.backends.local.LocalBackend",
            "OPTIONS": {"root": str(root), "bwrap": "bwrap"},
        },
        "fake": {"BACKEND": "scheduling.backends.fake.FakeBackend", "OPTIONS": {}},
    }
    site_view_invalidate()
    yield
    site_view_invalidate()


@pytest.fixture
def site(db):
    """The seed's default site with demo accounts; pools run on the fake backend."""
    call_command("seed_demo", backend="fake", quiet=True)
    site_view_invalidate()


@pytest.fixture
def researcher(site):
    from django.contrib.auth.models import User

    return User.objects.get(username="alice")  # member of materials and climate


@pytest.fixture
def outsider(site):
    from django.contrib.auth.models import User

    return User.objects.get(username="bob")  # member of genomics only


@pytest.fixture
def api(researcher) -> APIClient:
    client = APIClient()
    client.force_authenticate(researcher)
    return client


@pytest.fixture
def outsider_api(outsider) -> APIClient:
    client = APIClient()
    client.force_authenticate(outsider)
    return client


@pytest.fixture
def browser(researcher) -> Client:
    """Django's test client, logged in as the researcher (for the pages)."""
    client = Client()
    client.force_login(researcher)
    return client


@pytest.fixture
def outsider_browser(outsider) -> Client:
    client = Client()
    client.force_login(outsider)
    return client


def descriptor(**overrides) -> dict:
    """A small valid task descriptor; keyword arguments replace or add top-level fields."""
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Task",
        "name": "t1",
        "project": "materials",
        "resources": {"cpus": 1, "memory": "1Gi"},
        "walltime": "10m",
        "command": ["true"],
    }
    doc.update(overrides)
    return {k: v for k, v in doc.items() if v is not None}


def submit(client: APIClient, doc: dict | str, content_type: str = "application/json"):
    body = doc if isinstance(doc, str | bytes) else json.dumps(doc)
    return client.post("/api/v1/tasks/", data=body, content_type=content_type)
