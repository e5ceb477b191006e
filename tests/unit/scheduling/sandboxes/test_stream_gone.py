"""A streamed exec whose client goes away before the command ends: the command runs on, its
end is still recorded in the sandbox's history (and its idle time counts from then), and its
call slot goes back when it ends (docs/sandboxes.md)."""

from __future__ import annotations

import json
import threading
import time
from unittest import mock

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections

from scheduling.backends.base import ExecResult
from scheduling.backends.fake import FakeBackend
from scheduling.models import SandboxExec
from scheduling.services import sandbox_calls
from tests.unit.scheduling.sandboxes.helpers import create

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_stream_left_by_its_client_still_records_the_end_of_its_command(api, researcher):
    sid = create(api).json()["id"]
    go = threading.Event()

    def slow(self, backend_id, request, *, on_output=None):
        on_output("stdout", b"started\n")
        assert go.wait(10)
        return ExecResult(b"started\n", b"", 3, 12.5)

    with mock.patch.object(FakeBackend, "exec_in", autospec=True, side_effect=slow):
        response = api.post(
            f"/api/v1/sandboxes/{sid}/exec/?stream=1",
            data=json.dumps({"command": ["long"]}),
            content_type="application/json",
        )
        first = next(iter(response.streaming_content))
        assert json.loads(first) == {"stream": "stdout", "data": "started\n"}
        request_finished.disconnect(close_old_connections)
        try:
            response.close()  # the client hung up mid-stream
        finally:
            request_finished.connect(close_old_connections)
        assert SandboxExec.objects.get().ended_at is None  # it runs on
        go.set()
        end = time.monotonic() + 10
        while SandboxExec.objects.get().ended_at is None and time.monotonic() < end:
            time.sleep(0.02)
    row = SandboxExec.objects.get()
    assert row.ended_at is not None and row.exit_code == 3
    assert sandbox_calls.held(researcher.pk) == 0
