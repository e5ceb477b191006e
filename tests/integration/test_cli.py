"""The `switchyard` command against a live portal with a real worker: login → submit → wait →
logs, and the exit codes a script relies on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import worker_log

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLI = Path(sys.executable).parent / "switchyard"  # the console script the package installs


@pytest.fixture
def cli(live_server, tmp_path):
    config = tmp_path / "home" / "switchyard.json"

    def run(*args: str, stdin: str = "", config_path: Path = config) -> subprocess.CompletedProcess:
        env = {**os.environ, "SWITCHYARD_CONFIG": str(config_path)}
        env.pop("SWITCHYARD_URL", None)
        env.pop("SWITCHYARD_TOKEN", None)
        return subprocess.run(
            [str(CLI), "--url", live_server.url, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )

    run.config = config  # type: ignore[attr-defined]
    return run


def test_login_submit_wait_logs(site, start_worker, cli, tmp_path, live_server):
    proc = start_worker()
    login = cli("login", "-u", "alice", "--password-stdin", stdin="alice-demo-pass\n")
    assert login.returncode == 0, login.stderr
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert json.loads(cli.config.read_text())["token"]

    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: switchyard/v1\nkind: Task\nname: from-cli\nproject: materials\n"
        "resources: {cpus: 1, memory: 1Gi}\nwalltime: 10m\n"
        "command: [sh, -c, 'echo hello-from-the-cli']\n"
    )
    made = cli("-o", "json", "submit", str(job))
    assert made.returncode == 0, made.stderr
    task_id = str(json.loads(made.stdout)["id"])
    shown = cli("submit", str(job))  # as a person reads it: the task's page to open
    assert shown.returncode == 0, shown.stderr
    page = shown.stdout.splitlines()[-1].strip()
    assert page.startswith(f"{live_server.url}/tasks/") and page.endswith("/"), shown.stdout

    waited = cli("wait", task_id, "--timeout", "90", "--interval", "0.3")
    assert waited.returncode == 0, (waited.stdout, waited.stderr, worker_log(proc))
    assert "succeeded" in waited.stdout
    logs = cli("logs", task_id)
    assert logs.returncode == 0 and "hello-from-the-cli" in logs.stdout
    followed = cli("logs", "-f", task_id)
    assert followed.returncode == 0 and "hello-from-the-cli" in followed.stdout
    # Following a log past invalid UTF-8 loses nothing after it: offsets are bytes of the raw
    # log, not of the text with U+FFFD in it (the job writes the rest while `-f` follows).
    odd = cli(
        "-o",
        "json",
        "submit",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "switchyard/v1",
                "kind": "Task",
                "name": "odd-bytes",
                "project": "materials",
                "resources": {"cpus": 1, "memory": "1Gi"},
                "walltime": "10m",
                "command": [
                    "sh",
                    "-c",
                    r"printf 'bad:\377\376\375\n'; sleep 3; echo after-the-bad-bytes",
                ],
            }
        ),
    )
    assert odd.returncode == 0, odd.stderr
    odd_id = str(json.loads(odd.stdout)["id"])
    followed = cli("logs", "-f", odd_id, "--interval", "0.2")
    assert followed.returncode == 0, (followed.stderr, worker_log(proc))
    assert "bad:\ufffd\ufffd\ufffd\nafter-the-bad-bytes\n" in followed.stdout, followed.stdout

    status = cli("-o", "json", "status", task_id)
    assert json.loads(status.stdout)["state"] == "succeeded"
    assert task_id in cli("status").stdout

    # from stdin; a failing task makes `wait` exit 1
    failing = cli(
        "-o",
        "json",
        "submit",
        "-",
        "--wait",
        "--timeout",
        "90",
        "--interval",
        "0.3",
        stdin=json.dumps(
            {
                "apiVersion": "switchyard/v1",
                "kind": "Task",
                "name": "fails",
                "project": "materials",
                "resources": {"cpus": 1, "memory": "1Gi"},
                "walltime": "10m",
                "command": ["false"],
            }
        ),
    )
    assert failing.returncode == 1, (failing.stdout, failing.stderr)
    assert cli("workflows").returncode == 0
    assert cli("usage").returncode == 0


def test_exit_codes_and_errors_a_script_can_use(site, cli, tmp_path):
    # not logged in
    nobody = cli("status", config_path=tmp_path / "none.json")
    assert nobody.returncode == 3 and "login" in nobody.stderr
    wrong = cli("login", "-u", "alice", "--password-stdin", stdin="nope\n")
    assert wrong.returncode == 2 and "wrong username or password" in wrong.stderr
    assert not cli.config.exists()
    assert (
        cli("login", "-u", "alice", "--password-stdin", stdin="alice-demo-pass\n").returncode == 0
    )
    # a bad descriptor: the field, what was expected, what it got
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: switchyard/v1\nkind: Task\nname: x\nproject: materials\n"
        "resources: {cpus: -3}\nwalltime: 10m\ncommand: [true]\n"
    )
    refused = cli("submit", str(bad))
    assert refused.returncode == 2 and "resources.cpus" in refused.stderr
    missing = cli("submit", str(tmp_path / "no-such-file.yaml"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    # another project's task, or none: not found
    assert cli("cancel", "99999999").returncode == 4
    assert cli("logs", "99999999").returncode == 4
    # a portal that is not there
    away = subprocess.run(
        [str(CLI), "--url", "http://127.0.0.1:9", "status"],
        capture_output=True,
        text=True,
        env={**os.environ, "SWITCHYARD_CONFIG": str(cli.config)},
        timeout=60,
    )
    assert away.returncode == 6 and "cannot reach" in away.stderr
    assert cli("logout").returncode == 0
    assert cli("status").returncode == 3


def test_login_to_an_account_with_two_factor_takes_the_apps_code(site, cli):
    from django.contrib.auth.models import User
    from django_otp.oath import totp
    from django_otp.plugins.otp_totp.models import TOTPDevice

    device = TOTPDevice.objects.create(user=User.objects.get(username="alice"), confirmed=True)
    password = "alice-demo-pass\n"
    # No terminal to ask on: the answer says what is missing.
    refused = cli("login", "-u", "alice", "--password-stdin", stdin=password)
    assert refused.returncode != 0
    assert "otp: required: the code your app shows" in refused.stderr
    assert not cli.config.exists()
    code = f"{totp(device.bin_key):06d}"
    done = cli("login", "-u", "alice", "--password-stdin", "--otp", code, stdin=password)
    assert done.returncode == 0, done.stderr
    assert json.loads(cli.config.read_text())["token"]
