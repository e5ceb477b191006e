"""One role of a deployment, as a container or a service unit runs it (docs/deployment.md):

    manage.py serve web [--addr 0.0.0.0:8000] [--workers N]   gunicorn (config/runtime/serve.py)
    manage.py serve worker [--hostname name@host] [--concurrency N]   a Celery worker
    manage.py serve beat                                      the periodic passes (one sends)
    manage.py serve migrate                                   migrate, then collect static files

`manage.py up` runs web, worker and beat in one go on one machine with the same command lines
(config/runtime/serve.py, config/runtime/workers.py). `--print` shows the command line instead of running it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from config.metrics import files as metrics_files
from config.runtime.serve import STATIC_MANIFEST_ENV, web_argv
from config.runtime.workers import beat_argv, worker_argv

ROLES = ("web", "worker", "beat", "migrate")


class Command(BaseCommand):
    help = "Run one role of a deployment: web, worker, beat or migrate."

    def add_arguments(self, parser):
        parser.add_argument("role", choices=ROLES)
        parser.add_argument("--addr", default="0.0.0.0:8000", help="web: host:port to bind")
        parser.add_argument("--workers", type=int, default=None, help="web: processes")
        parser.add_argument("--hostname", default=None, help="worker: its name, name@host")
        parser.add_argument("--concurrency", type=int, default=2, help="worker: processes")
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument(
            "--print", action="store_true", help="print the command line as JSON, run nothing"
        )

    def handle(self, *args, role: str, **o):
        if role == "migrate":
            if o["print"]:
                self.stdout.write(json.dumps(["migrate", "collectstatic"]))
                return
            call_command("migrate", interactive=False, verbosity=1)
            # Hashed static file names need the manifest storage, chosen at start-up.
            subprocess.run(
                [
                    sys.executable,
                    str(settings.BASE_DIR / "manage.py"),
                    "collectstatic",
                    "--noinput",
                    "--verbosity=0",
                ],
                env={**os.environ, STATIC_MANIFEST_ENV: "1"},
                cwd=settings.BASE_DIR,
                check=True,
            )
            return
        if role == "web":
            argv = web_argv(
                o["addr"],
                workers=o["workers"],
                access_log=True,
                control_socket=str(settings.VAR_DIR / "gunicorn.ctl"),
            )
        elif role == "worker":
            argv = worker_argv(
                beat_schedule=None,
                loglevel=o["loglevel"],
                concurrency=o["concurrency"],
                hostname=o["hostname"],
            )
        else:
            argv = beat_argv(
                schedule=settings.VAR_DIR / "celerybeat-schedule", loglevel=o["loglevel"]
            )
        if o["print"]:
            self.stdout.write(json.dumps(argv))
            return
        env = {**os.environ, STATIC_MANIFEST_ENV: "1"} if role == "web" else dict(os.environ)
        # The role's metrics folder, emptied: its processes start counting afresh.
        env |= metrics_files.role_env(
            settings.SWITCHYARD_METRICS_DIR, role, enabled=settings.SWITCHYARD_METRICS
        )
        os.chdir(settings.BASE_DIR)
        os.execvpe(argv[0], argv, env)  # this process becomes the server
