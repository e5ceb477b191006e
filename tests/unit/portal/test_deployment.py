"""The deployment in docker/ (docs/deployment.md). No container engine runs here, so the test
runs what the containers would: each service's command, through the image's entrypoint
(`manage.py serve <role>`), on this machine; and checks that the image can be built from what
the repository holds."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from config.runtime.serve import web_argv
from config.runtime.workers import beat_argv, worker_argv

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
PORTAL_SERVICES = ("migrate", "web", "worker", "beat")


def _entrypoint() -> list[str]:
    line = next(x for x in DOCKERFILE.splitlines() if x.startswith("ENTRYPOINT"))
    return json.loads(line.removeprefix("ENTRYPOINT"))


def _command(service: str) -> list[str]:
    """What the container runs: the entrypoint, then the service's command (its role)."""
    entry = _entrypoint()
    assert entry[:2] == ["python", "manage.py"], entry
    return [
        sys.executable,
        str(ROOT / "manage.py"),
        *entry[2:],
        *COMPOSE["services"][service]["command"],
    ]


def test_every_portal_service_is_the_one_image_with_a_role():
    for name in PORTAL_SERVICES:
        service = COMPOSE["services"][name]
        assert service["image"] == "switchyard:latest", name
        assert service["build"]["dockerfile"] == "docker/Dockerfile"
        assert service["environment"]["DATABASE_URL"].startswith("postgres://")
        assert service["environment"]["REDIS_URL"].startswith("redis://")
    assert {"db", "redis"} <= set(COMPOSE["services"])
    assert "noeviction" in " ".join(COMPOSE["services"]["redis"]["command"])


def _environments() -> dict[str, dict[str, str]]:
    return {name: service.get("environment") or {} for name, service in COMPOSE["services"].items()}


def test_the_compose_file_holds_no_credential():
    text = (ROOT / "docker" / "compose.yaml").read_text()
    assert not re.search(r"://[^/@\s:]+:[^/@\s]+@", text), "a password in a URL"
    secret_words = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY$")
    for service, env in _environments().items():
        for name, value in env.items():
            if secret_words.search(name):
                assert name.endswith("_FILE"), f"{service}: {name} is given in the file"
                assert value.startswith("/run/secrets/"), f"{service}: {name}={value}"
    for name, secret in COMPOSE["secrets"].items():
        assert set(secret) == {"file"} and secret["file"].startswith("./secrets/"), name
    assert "/docker/secrets/" in (ROOT / ".gitignore").read_text().splitlines()


def test_every_secret_a_service_reads_is_mounted_into_it():
    for service, env in _environments().items():
        mounted = set(COMPOSE["services"][service].get("secrets", []))
        read = {
            v.removeprefix("/run/secrets/")
            for v in env.values()
            if str(v).startswith("/run/secrets/")
        }
        assert read <= mounted, f"{service} reads {read - mounted} without mounting it"
        assert mounted <= set(COMPOSE["secrets"]), service
    redis = COMPOSE["services"]["redis"]
    assert "requirepass" in " ".join(redis["command"])
    assert "/run/secrets/redis_password" in " ".join(redis["command"])
    assert "REDISCLI_AUTH" in " ".join(redis["healthcheck"]["test"])
    db = COMPOSE["services"]["db"]
    assert db["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/db_password"


def _networks(service: str) -> set[str]:
    return set(COMPOSE["services"][service].get("networks") or ["default"])


def test_only_the_front_publishes_ports_and_the_database_and_broker_are_internal():
    services = COMPOSE["services"]
    assert {name for name, service in services.items() if service.get("ports")} == {"front"}
    assert COMPOSE["networks"]["control"]["internal"] is True
    assert _networks("db") == _networks("redis") == {"control"}
    on_control = {name for name in services if "control" in _networks(name)}
    assert on_control == {"db", "redis", *PORTAL_SERVICES}
    # The front reaches web and nothing else; the worker reaches out over a network that no
    # other service is on.
    assert _networks("front") == {"front"} and "front" in _networks("web")
    assert {name for name in services if "egress" in _networks(name)} == {"worker"}
    assert not COMPOSE["networks"]["egress"].get("internal")


def test_the_front_is_the_image_running_the_shipped_nginx_config():
    front = COMPOSE["services"]["front"]
    assert front["image"] == "switchyard:latest"
    assert front["entrypoint"][:3] == ["nginx", "-c", "/etc/nginx/switchyard.conf"]
    assert "COPY docker/nginx/switchyard.conf /etc/nginx/switchyard.conf" in DOCKERFILE
    assert "nginx-light" in DOCKERFILE
    config = (ROOT / "docker" / "nginx" / "switchyard.conf").read_text()
    for secret in front["secrets"]:
        assert f"/run/secrets/{secret};" in config
    assert "server web:8000;" in config
    assert sorted(port.split(":")[-1] for port in front["ports"]) == ["443", "80"]
    web = COMPOSE["services"]["web"]["environment"]
    assert web["SWITCHYARD_TLS"] == web["SWITCHYARD_BEHIND_PROXY"] == "1"
    # The portal believes forwarding headers from the front's fixed address alone.
    assert web["SWITCHYARD_TRUSTED_PROXIES"] == front["networks"]["front"]["ipv4_address"]


def test_the_settings_start_on_the_compose_environment_and_its_secrets(tmp_path):
    """The web service's environment, its secret files made here: settings load (no
    credential refused) and read each secret from its file."""
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SWITCHYARD_"))}
    for name, value in COMPOSE["services"]["web"]["environment"].items():
        value = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))  # compose's defaults
        if value.startswith("/run/secrets/"):
            secret = value.removeprefix("/run/secrets/")
            (secrets_dir / secret).write_text(f"{secret}-" + "s" * 50 + "\n")
            value = str(secrets_dir / secret)
        env[name] = value
    env["SWITCHYARD_VAR_DIR"] = str(tmp_path / "var")
    show = (
        "from django.conf import settings; print(settings.SECRET_KEY); "
        "print(settings.DATABASES['default']['PASSWORD']); print(settings.CELERY_BROKER_URL)"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v0", "-c", show],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    key, password, broker = done.stdout.split()
    assert key.startswith("django_secret_key-") and password.startswith("db_password-")
    assert broker.startswith("redis://:redis_password-") and broker.endswith("@redis:6379/0")


def test_the_image_copies_only_what_the_repository_holds():
    context = ROOT / COMPOSE["services"]["web"]["build"]["context"].replace("..", ".")
    for line in DOCKERFILE.splitlines():
        if line.startswith("COPY "):
            *sources, _ = shlex.split(line.removeprefix("COPY "))
            for source in sources:
                assert (context / source).exists(), f"{line}: {source} is missing"


def _print(service: str, env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [*_command(service), "--print"],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


@pytest.fixture
def var_env(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return env | {"SWITCHYARD_VAR_DIR": str(var), "DJANGO_SECRET_KEY": "deploy-test-" + "k" * 40}


def test_the_services_run_the_command_lines_make_run_starts(var_env):
    web = _print("web", var_env)
    addr = COMPOSE["services"]["web"]["command"][-1]
    control = str(Path(var_env["SWITCHYARD_VAR_DIR"]) / "gunicorn.ctl")
    assert web == web_argv(addr, access_log=True, control_socket=control)
    worker = _print("worker", var_env)
    assert worker == worker_argv(beat_schedule=None, loglevel="INFO", concurrency=2)
    beat = _print("beat", var_env)
    assert beat == beat_argv(
        schedule=Path(var_env["SWITCHYARD_VAR_DIR"]) / "celerybeat-schedule", loglevel="INFO"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(proc: subprocess.Popen, log: Path, pattern: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log.read_text()):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {pattern!r} in:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def test_each_role_starts_from_its_container_command(var_env, tmp_path):
    """migrate, then web, worker and beat as the containers start them (SQLite and the
    filesystem broker stand in for the compose file's PostgreSQL and Redis here)."""
    subprocess.run(_command("migrate"), env=var_env, cwd=ROOT, check=True, capture_output=True)
    assert (Path(var_env["SWITCHYARD_VAR_DIR"]) / "staticfiles" / "staticfiles.json").exists()
    port = _free_port()
    procs = []
    try:
        for role, extra, ready in (
            ("web", ["--addr", f"127.0.0.1:{port}", "--workers", "1"], r"Booting worker"),
            ("worker", ["--hostname", "deploy-test@host-a"], r"ready\."),
            ("beat", [], r"sending the periodic passes"),
        ):
            argv = [*_command(role)[:3], role, *extra]  # the service's role, on a free port
            log = tmp_path / f"{role}.log"
            with log.open("w") as out:
                proc = subprocess.Popen(
                    argv,
                    env=var_env,
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            procs.append(proc)
            _until(proc, log, ready)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=10) as response:
            assert response.status == 200
    finally:
        for proc in procs:  # as a container stops: SIGTERM to the main process, then KILL
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_make_runs_portal_stops_everything_it_started_the_local_launcher_too(var_env, tmp_path):
    """`manage.py up` (what `make run` runs) on its own var dir, metrics on: beat keeps
    sending (a beat forked inside the worker died at its first tick on the metrics files it
    had inherited, closed); a SIGTERM stops the web server, the worker and beat, and the local
    backend's launcher goes with them."""
    from scheduling.backends.local import launcher

    var = Path(var_env["SWITCHYARD_VAR_DIR"])
    root = var / "local-backend"
    root.mkdir(mode=0o711)
    # A launcher serving the backend's root, as after the first local job.
    run = [sys.executable, "-I", "-S", str(ROOT / "scheduling/backends/local/launcher.py")]
    subprocess.run([*run, str(root)], check=True, env=var_env)
    pid = int(Path(launcher.pid_path(str(root))).read_text().split()[0])
    port = _free_port()
    log = tmp_path / "up.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "up",
                "--no-seed",
                "--no-images",
                "--addr",
                f"127.0.0.1:{port}",
            ],
            env=var_env | {"SWITCHYARD_METRICS": "1"},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _until(proc, log, r"Switchyard is up", timeout=120)
        _until(proc, log, r"sending the periodic passes", timeout=60)  # the worker and beat
        time.sleep(3)  # its next ticks: `up` stops everything when one of its processes ends
        assert proc.poll() is None, log.read_text()
        assert "Traceback" not in log.read_text()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) is not None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), "the launcher is still running"
    left = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and str(var).encode() in (entry / "cmdline").read_bytes():
                left.append(entry.name)
    assert not left, f"processes of the stopped portal: {left}"
