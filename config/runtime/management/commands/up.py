"""Run the whole portal on this machine: web server, Celery worker and beat, seeded demo site
(written at the first start, kept as it is at the next ones: `--reseed` writes it afresh).

Ctrl-C stops everything. The embedded default needs no server: SQLite and a filesystem broker.
The web server is gunicorn (config/runtime/serve.py); `--dev` serves with Django's runserver instead,
which reloads on code changes and is for development only (docs/deployment.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from config.metrics import files as metrics_files
from config.runtime.demo_images import start_demo_registry
from config.runtime.serve import GRACEFUL_TIMEOUT_S, STATIC_MANIFEST_ENV, web_argv
from config.runtime.workers import beat_argv, worker_argv
from scheduling.usage import close_backends


class Command(BaseCommand):
    help = "Migrate, seed the demo site, and run web + worker + beat until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000")
        parser.add_argument("--no-seed", action="store_true", help="no demo site or accounts")
        parser.add_argument(
            "--reseed",
            action="store_true",
            help="write the demo site afresh (by default a start keeps the one written before, "
            "with the changes made since)",
        )
        parser.add_argument(
            "--no-images",
            action="store_true",
            help="do not start the demo image registry (docs/containers.md)",
        )
        parser.add_argument("--backend", default="local", help="backend alias for the demo pools")
        parser.add_argument(
            "--web-workers",
            type=int,
            default=None,
            help="web server processes (default: cores + 1)",
        )
        parser.add_argument(
            "--dev",
            action="store_true",
            help="serve with Django's runserver (reloads on code changes; development only)",
        )

    def handle(self, *args, addr: str, no_seed: bool, backend: str, dev: bool, **options):
        if not options["no_images"]:
            start_demo_registry(self.stdout)
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        for folder in ("queue", "processed"):
            (settings.BROKER_DIR / folder).mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        # One machine, a person at its terminal: its web server and worker log text, unless
        # told otherwise (docs/operations.md, "Logs").
        os.environ.setdefault("SWITCHYARD_LOG_FORMAT", "text")
        if not no_seed:
            # The demo's accounts have published passwords: a second factor would guard
            # nothing and only slow trying each role. A site sets its own (docs/security.md).
            os.environ.setdefault("SWITCHYARD_2FA_REQUIRED_ROLES", "")
        # Static files with hashed names, for the web server to cache (config/runtime/serve.py).
        web_env = {**os.environ, "DJANGO_DEBUG": os.environ.get("DJANGO_DEBUG", "0")}
        if not dev:
            web_env[STATIC_MANIFEST_ENV] = "1"
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        subprocess.run(
            [*manage, "collectstatic", "--noinput", "--verbosity=0"],
            cwd=settings.BASE_DIR,
            env=web_env,
            check=True,
        )
        if not no_seed:
            call_command("seed_demo", backend=backend, if_new=not options["reseed"])

        if dev:
            web = [*manage, "runserver", addr]
        else:
            web = web_argv(
                addr,
                workers=options["web_workers"],
                control_socket=str(settings.VAR_DIR / "gunicorn.ctl"),
            )
        # Where the worker's local backend relays batch tasks' sandbox-API requests: here.
        worker_env = {"SWITCHYARD_WEB_ADDR": reachable(addr), **os.environ}
        # Each role's metrics folder, emptied: they start counting afresh (docs/operations.md).
        root, enabled = settings.SWITCHYARD_METRICS_DIR, settings.SWITCHYARD_METRICS
        web_env |= metrics_files.role_env(root, "web", enabled=enabled)
        worker_env |= metrics_files.role_env(root, "worker", enabled=enabled)
        beat_env = {**os.environ} | metrics_files.role_env(root, "beat", enabled=enabled)
        # Beat in a process of its own, as a deployment runs it (`manage.py serve beat`): one
        # inside the worker (`-B`) is forked from it and closes every file it inherits, the
        # worker's metrics files among them, and died at its first tick writing to them.
        procs = {
            "worker": subprocess.Popen(
                worker_argv(beat_schedule=None), cwd=settings.BASE_DIR, env=worker_env
            ),
            "beat": subprocess.Popen(
                beat_argv(schedule=settings.VAR_DIR / "celerybeat-schedule"),
                cwd=settings.BASE_DIR,
                env=beat_env,
            ),
            # gunicorn in a session of its own: Ctrl-C reaches only this command, which
            # stops it; the terminal's SIGINT to its workers as well, beside the master's
            # own signal, could leave one stuck in its handlers, still holding the port.
            "web": subprocess.Popen(
                web, cwd=settings.BASE_DIR, env=web_env, start_new_session=not dev
            ),
        }
        self.stdout.write(
            self.style.SUCCESS(
                f"\nSwitchyard is up: http://{addr}/  (log in as alice / alice-demo-pass)"
            )
        )
        if not no_seed:
            self.stdout.write(
                "Other roles: bob (lead of genomics), quinn (queue admin), finn (finance), admin "
                "(platform admin), each with password <name>-demo-pass; two-factor codes are "
                "not asked in the demo (SWITCHYARD_2FA_REQUIRED_ROLES)."
            )
        self.stdout.write(f"API docs: http://{addr}/api/v1/docs/   Admin: http://{addr}/admin/")
        self.stdout.write("Press Ctrl-C to stop the web server, worker and beat.\n")
        # A SIGTERM (from a supervisor, or `timeout`) stops the children too, like Ctrl-C.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            while all(p.poll() is None for p in procs.values()):
                time.sleep(0.5)
            dead = [name for name, p in procs.items() if p.poll() is not None]
            self.stderr.write(f"{', '.join(dead)} stopped; shutting down the rest")
        except KeyboardInterrupt:
            pass
        finally:
            # A second Ctrl-C (or SIGTERM) must not cut the stop short: gunicorn, in its own
            # session, is stopped only here.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            web_ran = procs["web"].poll() is None  # its group is still its own
            for p in procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for name, p in procs.items():
                try:
                    # gunicorn lets a request finish for its graceful timeout
                    p.wait(timeout=GRACEFUL_TIMEOUT_S + 5 if name == "web" else 10)
                except subprocess.TimeoutExpired:
                    p.kill()
            if web_ran and not dev:  # any web worker left behind by its master
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(procs["web"].pid, signal.SIGKILL)
            # The local backends' launchers would leave after two idle minutes; they go now.
            # Jobs still running keep their supervisors (they outlive the worker).
            close_backends()


def reachable(addr: str) -> str:
    """The web server's address as a process of this machine connects to it: a bind to every
    address (0.0.0.0, [::] or none) is reached at 127.0.0.1."""
    host, _, port = addr.rpartition(":")
    return f"{'127.0.0.1' if host in ('', '0.0.0.0', '[::]', '*') else host}:{port}"
