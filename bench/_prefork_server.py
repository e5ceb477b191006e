"""A minimal pre-fork WSGI server for the API bench: `python bench/_prefork_server.py HOST:PORT N [--nodelay]`.

No production WSGI server (gunicorn, uWSGI…) is installed in this venv, and Django's
runserver is one process (its threads share one GIL). This stands in for "gunicorn -w N
--threads T": the parent binds the socket, forks N processes, and each serves the portal's
WSGI application with Django's own threaded server on the shared socket (the kernel hands
each connection to one of them). It is a measuring aid, not something to deploy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    addr, workers = sys.argv[1], int(sys.argv[2])
    nodelay = "--nodelay" in sys.argv[3:]
    host, port = addr.rsplit(":", 1)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.db import connections

    from portal.wsgi import application

    class Handler(WSGIRequestHandler):
        # Django's handler writes the headers and the body with separate send() calls; with
        # Nagle on, the body waits for the client's delayed ACK of the headers (~40 ms).
        disable_nagle_algorithm = nodelay

    connections.close_all()  # nothing open may be shared across the fork
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)

    children = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            server = ThreadedWSGIServer((host, int(port)), Handler, bind_and_activate=False)
            server.socket.close()
            server.socket = sock
            # What server_bind() would have set: the names the WSGI environ carries.
            server.server_name, server.server_port = host, int(port)
            server.setup_environ()
            server.set_app(application)
            try:
                server.serve_forever()
            finally:
                os._exit(0)
        children.append(pid)

    def stop(signo, frame):
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(
        f"prefork server on {addr}: {workers} processes {children}, nodelay={nodelay}", flush=True
    )
    for _ in children:
        os.wait()


if __name__ == "__main__":
    main()
