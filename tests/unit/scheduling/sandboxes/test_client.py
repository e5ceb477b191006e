"""The Python client and `switchyard sandbox` against a live portal (the fake backend's
sessions behind it): create → files → exec → delete, and the exit codes."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.contrib.auth.models import User
from switchyard_cli import cli
from switchyard_cli.client import CONFLICT, NOT_FOUND, CliError
from switchyard_cli.sandbox import Sandbox

from scheduling.models import Sandbox as SandboxRow
from scheduling.services import sandbox_calls

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_python_client_builds_on_its_own_files_and_deletes_on_exit(cli_portal):
    with Sandbox.create("materials") as box:
        assert box.state == "ready"
        box.write("step1.txt", "one\n")
        for i in range(2, 6):
            previous = box.exec(["cat", f"step{i - 1}.txt"]).stdout
            box.write(f"step{i}.txt", previous + f"{i}\n".encode())
        done = box.exec(["cat", "step5.txt"])
        assert done.text == "one\n2\n3\n4\n5\n" and done.exit_code == 0
        assert box.read("step5.txt") == done.stdout
        streamed = list(box.exec_stream(["echo", "streamed"]))
        assert streamed[0] == ("stdout", b"streamed\n") and streamed[-1][0] == "result"
        sid = box.id
    assert SandboxRow.objects.get(public_id=sid).state == "ended"
    with pytest.raises(CliError) as caught:
        Sandbox.attach(sid).exec(["true"])
    assert caught.value.code == CONFLICT


def test_the_command_line(cli_portal, capsys):
    assert cli.main(["-o", "json", "sandbox", "create", "--project", "materials"]) == 0
    sid = json.loads(capsys.readouterr().out)["id"]
    assert cli.main(["sandbox", "exec", sid, "--", "echo", "hi"]) == 0
    assert capsys.readouterr().out == "hi\n"
    assert cli.main(["sandbox", "exec", sid, "--", "exit", "3"]) == 3
    assert cli.main(["sandbox", "ls"]) == 0
    assert sid in capsys.readouterr().out
    assert cli.main(["sandbox", "rm", sid]) == 0
    assert cli.main(["sandbox", "show", "sbx-0"]) == NOT_FOUND


def test_the_client_waits_and_tries_again_while_the_portal_answers_busy(cli_portal, settings):
    settings.SWITCHYARD_SANDBOX_CALLS_PER_USER = 3
    alice = User.objects.get(username="alice")
    box = Sandbox.create("materials")
    for _ in range(3):  # three calls of alice's in flight in the portal's process
        sandbox_calls.take(alice.pk)
    release = threading.Timer(1.5, lambda: [sandbox_calls.give(alice.pk) for _ in range(3)])
    release.start()
    started = time.monotonic()
    try:
        assert box.exec(["echo", "hi"]).text == "hi\n"
    finally:
        release.join()
    assert time.monotonic() - started >= 1.5  # 429s (Retry-After: 1) until they ended
    box.delete()
