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


def _production(tmp_path, **env: str) -> dict[str, str]:
    return {
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "SWITCHYARD_VAR_DIR": str(tmp_path),
        **env,
    }


def test_it_refuses_to_start_with_the_database_password_the_project_shipped(tmp_path):
    shipped = "postgres://switchyard:switchyard@db:5432/switchyard"
    done = manage("check", env=_production(tmp_path, DATABASE_URL=shipped))
    assert done.returncode != 0
    assert "the database password is 'switchyard', which the project has shipped" in done.stderr
    # The web server's own command fails the same way, before it starts anything.
    served = manage("serve", "web", "--print", env=_production(tmp_path, DATABASE_URL=shipped))
    assert served.returncode != 0 and "which the project has shipped" in served.stderr


def test_it_refuses_a_database_or_broker_on_another_host_without_a_password(tmp_path):
    env = _production(
        tmp_path,
        DATABASE_URL="postgres://switchyard@db:5432/switchyard",
        REDIS_URL="redis://redis:6379/0",
    )
    done = manage("check", env=env)
    assert done.returncode != 0
    assert "the database on db is reached without a password" in done.stderr
    assert "Redis on redis is reached without a password" in done.stderr


def test_passwords_from_secret_files_reach_the_database_and_the_broker(tmp_path):
    db_password, redis_password = secrets.token_urlsafe(20), "p@ss/word:" + secrets.token_urlsafe(9)
    (tmp_path / "db").write_text(db_password + "\n")
    (tmp_path / "redis").write_text(redis_password)
    env = _production(
        tmp_path,
        DATABASE_URL="postgres://switchyard@db:5432/switchyard",
        DATABASE_PASSWORD_FILE=str(tmp_path / "db"),
        REDIS_URL="redis://redis:6379/0",
        REDIS_PASSWORD_FILE=str(tmp_path / "redis"),
    )
    show = (
        "from django.conf import settings; from kombu.utils.url import url_to_parts; "
        "print(settings.DATABASES['default']['PASSWORD']); "
        "print(url_to_parts(settings.CELERY_BROKER_URL).password); "
        "print(url_to_parts(settings.CACHES['default']['LOCATION']).password)"
    )
    done = manage("shell", "--verbosity", "0", "-c", show, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [db_password, redis_password, redis_password]
