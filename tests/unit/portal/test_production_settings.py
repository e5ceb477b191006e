"""Production settings: no secret, no start; behind TLS, `check --deploy` finds nothing."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from tests.conftest import ROOT


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SWITCHYARD_"))}
    base.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_debug_off_refuses_to_start_without_a_secret(tmp_path):
    done = manage("check", env={"DJANGO_DEBUG": "0", "SWITCHYARD_VAR_DIR": str(tmp_path)})
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) is not set" in done.stderr


def test_the_secret_may_come_from_a_file(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(secrets.token_urlsafe(50))
    env = {"DJANGO_SECRET_KEY_FILE": str(key_file), "SWITCHYARD_VAR_DIR": str(tmp_path)}
    assert manage("check", env=env).returncode == 0


def test_a_tls_deployment_passes_check_deploy_without_warnings(tmp_path):
    env = {
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "portal.example.org",
        "SWITCHYARD_TLS": "1",
        "SWITCHYARD_VAR_DIR": str(tmp_path),
    }
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


def test_without_tls_check_deploy_says_what_is_missing(tmp_path):
    env = {
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "portal.example.org",
        "SWITCHYARD_VAR_DIR": str(tmp_path),
    }
    done = manage("check", "--deploy", env=env)
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stdout + done.stderr
