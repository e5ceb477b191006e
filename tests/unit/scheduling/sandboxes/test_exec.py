"""Exec's answer: text by default, base64 when asked, streamed as newline-delimited JSON, and
every malformed request refused naming its field (docs/sandboxes.md, "Exec")."""

from __future__ import annotations

import base64
import json

import pytest

from scheduling.models import SandboxExec
from tests.unit.scheduling.sandboxes.helpers import create, run

pytestmark = pytest.mark.django_db


@pytest.fixture
def sid(api) -> str:
    return create(api).json()["id"]


def test_binary_output_comes_as_base64_when_asked(api, sid):
    raw = b"\xff\x00\xfe"
    api.put(f"/api/v1/sandboxes/{sid}/files/b.bin", data=raw, content_type="application/x")
    done = run(api, sid, ["cat", "b.bin"], binary=True).json()
    assert base64.b64decode(done["stdout_b64"]) == raw and "stdout" not in done
    as_text = run(api, sid, ["cat", "b.bin"]).json()
    assert as_text["stdout"] == "\ufffd\x00\ufffd"


def test_stdin_reaches_the_command(api, sid):
    assert run(api, sid, ["cat"], stdin="hello").json()["stdout"] == "hello"
    b64 = base64.b64encode(b"\x01\x02").decode()
    done = run(api, sid, ["cat"], stdin_b64=b64, binary=True).json()
    assert base64.b64decode(done["stdout_b64"]) == b"\x01\x02"


def test_the_streaming_variant_sends_chunks_then_the_result(api, sid):
    response = api.post(
        f"/api/v1/sandboxes/{sid}/exec/?stream=1",
        data=json.dumps({"command": ["echo", "a", "b"]}),
        content_type="application/json",
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["X-Accel-Buffering"] == "no"  # the front passes chunks on as they come
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert lines[0] == {"stream": "stdout", "data": "a b\n"}
    assert lines[-1]["exit_code"] == 0 and "duration_ms" in lines[-1]
    row = SandboxExec.objects.get()
    assert (row.exit_code, row.stdout_bytes, row.preview) == (0, 4, "a b\n")


def test_a_failing_command_is_an_answer_not_an_error(api, sid):
    done = run(api, sid, ["cat", "missing"])
    assert done.status_code == 200
    assert done.json()["exit_code"] == 1 and "No such file" in done.json()["stderr"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"command": "ls -l"}, "command"),
        ({"command": []}, "command"),
        ({"command": [""]}, "command"),
        ({"command": ["ls", 3]}, "command"),
        ({"command": ["ls"], "timeout": 0}, "timeout"),
        ({"command": ["ls"], "timeout": "5"}, "timeout"),
        ({"command": ["ls"], "env": {"1X": "a"}}, "env.1X"),
        ({"command": ["ls"], "cwd": ""}, "cwd"),
        ({"command": ["ls"], "stdin_b64": "***"}, "stdin_b64"),
        ({"command": ["ls"], "shell": True}, "shell"),
    ],
)
def test_a_malformed_exec_names_its_field(api, sid, body, field):
    response = api.post(
        f"/api/v1/sandboxes/{sid}/exec/", data=json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["errors"][0]["field"] == field
    assert SandboxExec.objects.count() == 0


def test_a_file_missing_in_the_sandbox_is_a_404(api, sid):
    assert api.get(f"/api/v1/sandboxes/{sid}/files/nothing").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        '{"command": ["echo", "\\ud800"]}',
        '{"command": ["echo"], "env": {"A": "x\\uDFFFy"}}',
        '{"command": ["echo"], "cwd": "\\ud83d"}',
        '{"command": ["cat"], "stdin": "\\udc00"}',
        "[" * 100_000,  # deeper than the parser goes
    ],
    ids=["argv", "env", "cwd", "stdin", "nested"],
)
def test_a_body_that_is_not_valid_unicode_or_json_is_a_400_not_a_crash(api, sid, body):
    answer = api.post(f"/api/v1/sandboxes/{sid}/exec/", data=body, content_type="application/json")
    assert answer.status_code == 400, answer.content
    made = api.post("/api/v1/sandboxes/", data=body, content_type="application/json")
    assert made.status_code == 400, made.content


def test_a_surrogate_pair_escaped_whole_is_text_like_any(api, sid):
    body = '{"command": ["echo", "\\ud83d\\ude00"]}'
    answer = api.post(f"/api/v1/sandboxes/{sid}/exec/", data=body, content_type="application/json")
    assert answer.json()["stdout"] == "\U0001f600\n"


def test_the_history_keeps_the_start_of_a_long_command_not_all_of_it(api, sid):
    script = "x" * 100_000
    assert run(api, sid, ["echo", script, "tail"]).json()["stdout"] == f"{script} tail\n"
    kept = SandboxExec.objects.get().argv
    assert kept[0] == "echo" and sum(map(len, kept)) < 4200
    assert kept[1].endswith("… (95912 more characters)")  # 100,000 - 4,092 + "tail"
