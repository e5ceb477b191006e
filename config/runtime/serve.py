"""The one web server command line: `manage.py up`, the deployment in docker/ and the benches
all serve the portal with it, so what is measured is what runs (docs/deployment.md).

gunicorn with threaded workers: several processes (one GIL each) share the listening socket,
each serving a few connections at once with keep-alive; gunicorn sets TCP_NODELAY, so a
response never waits for the client's delayed ACK (Django's runserver did: ~40 ms a request).
Static files are WhiteNoise's (config/settings.py), compressed and cached, from the same
processes. `manage.py up --dev` keeps Django's runserver for development (code reloads).
"""

from __future__ import annotations

import os
import sys

from config.env import env_networks

# Static files with content hashes in their names (cached for a year) once collectstatic has
# written them with this set; see STORAGES in config/settings.py.
STATIC_MANIFEST_ENV = "SWITCHYARD_STATIC_MANIFEST"

# How long a stopping web server lets the requests in flight finish.
GRACEFUL_TIMEOUT_S = 20


def default_workers() -> int:
    """Processes: one per core plus one, so one may wait on the database while the others
    run (and the Celery worker beside them still gets a core's share on a small machine)."""
    return (os.cpu_count() or 1) + 1


def web_argv(
    addr: str,
    *,
    workers: int | None = None,
    threads: int = 4,
    access_log: bool = False,
    control_socket: str | None = None,
    python: str = sys.executable,
) -> list[str]:
    """`gunicorn config.wsgi` bound to `addr` (host:port). `control_socket`: where gunicorn's
    control interface listens (`gunicornc -s PATH`: worker status, more or fewer workers, a
    graceful reload); without it there is none (gunicorn's default path is one per user,
    which two portals on one machine would share)."""
    argv = [
        python,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        "--bind",
        addr,
        "--workers",
        str(workers or default_workers()),
        "--worker-class",
        "gthread",
        "--threads",
        str(threads),
        # Long requests (a 10,000-task batch, an export) are streamed or bounded elsewhere;
        # a worker silent this long is stuck and is replaced.
        "--timeout",
        "120",
        "--graceful-timeout",
        str(GRACEFUL_TIMEOUT_S),
        "--keep-alive",
        "5",
        # Request-line and header limits: an oversized header is refused before Django.
        "--limit-request-line",
        "8190",
        "--limit-request-fields",
        "100",
        # Scheme headers (X-Forwarded-Proto) only from the proxies the portal trusts
        # (settings.TRUSTED_PROXIES, read from the same variable by the same helper; this
        # module loads no settings), and from no one by default: gunicorn's own default
        # trusts this host, where jobs run.
        "--forwarded-allow-ips",
        ",".join(str(network) for network in env_networks("SWITCHYARD_TRUSTED_PROXIES")),
        "--error-logfile",
        "-",
    ]
    if access_log:
        argv += ["--access-logfile", "-"]
    if control_socket:
        argv += ["--control-socket", control_socket]
    else:
        argv += ["--no-control-socket"]
    return argv
