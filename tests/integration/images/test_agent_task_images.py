"""A batch task with `sandboxes: true` in an image on the local backend: its forwarder runs
under the image's own python3 and reaches the real portal's sandbox API through the relay; an
image without python3 is refused naming it (docs/sandbox-network.md)."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

import pytest

from scheduling.backends.base import JobState
from tests.unit.scheduling.local_backend.helpers import finished

pytestmark = pytest.mark.django_db(transaction=True)

ASK = (
    "import os, urllib.error, urllib.request\n"
    "try:\n"
    "    urllib.request.urlopen(os.environ['SWITCHYARD_URL'] + '/api/v1/sandboxes/', timeout=20)\n"
    "except urllib.error.HTTPError as exc:\n"
    "    print('portal said', exc.code, exc.headers.get('WWW-Authenticate'))\n"
)


def with_sandboxes(request):
    return dataclasses.replace(request, spec=dataclasses.replace(request.spec, sandboxes=True))


def test_the_forwarder_runs_with_the_images_python_and_reaches_the_portal(
    make, in_image, live_server, settings
):
    settings.SWITCHYARD_WEB_ADDR = urlsplit(live_server.url).netloc
    backend = make()
    asked = in_image("switchyard/python:3", "asks", ["python3", "-c", ASK], type="agent")
    backend.submit(with_sandboxes(asked))
    job = finished(backend, "asks", timeout=120)
    log = backend.log("asks")
    assert job.state is JobState.SUCCEEDED, (job.reason, log)
    assert "portal said 401 Token" in log  # the portal's own answer: no token was sent


def test_an_image_without_python3_is_refused_naming_it(make, in_image, settings):
    backend = make()
    backend.submit(with_sandboxes(in_image("switchyard/base:1", "no-python", ["true"])))
    job = finished(backend, "no-python", timeout=120)
    assert job.state is JobState.FAILED
    assert "switchyard/base:1" in job.reason and "sandboxes: true" in job.reason, job.reason
