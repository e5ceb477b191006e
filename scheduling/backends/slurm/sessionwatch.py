"""A live sandbox's watcher on a Slurm node (slurm/session.py, docs/sandbox-slurm.md): the
hooks that slurm/watch.py's program runs before the sandbox starts and after it ends, as the
job's account. `prepare` makes the session's folder, writes the agent into it, starts the
session's proxy when it has an egress allow-list (session/egress.py, loaded from its source)
and binds the agent's socket; `finish` stops the proxy and removes them all.
"""

from __future__ import annotations

from pathlib import Path

from scheduling.backends.session import box, egress
from scheduling.backends.slurm.watch import watcher_program

# The watcher's hooks for a session: box.py's source (its own `from __future__` line goes:
# jobnet.py's, first in the program, stands for the whole), then prepare and finish. With an
# egress allow-list, prepare loads session/egress.py from its source (an argument, as the
# agent's is) and starts the session's proxy; finish stops it.
EGRESS_SOCKET_NAME = "egress.sock"
_BOX = (
    Path(box.__file__)
    .read_text(encoding="utf-8")
    .replace("from __future__ import annotations\n", "")
)
_HOOKS = r"""
import json, stat, types
egress = egress_handle = None
def private(path, text):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
def prepare(cmd):
    global folder, egress, egress_handle
    folder, source, allow, log, forward, egress_source = cmd[:6]
    cmd = cmd[6:]
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass  # a requeued job's, on the same node: its own account's, checked next
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        print("switchyard: the session's folder %s is not this job's own" % folder,
              file=sys.stderr)
        sys.exit(1)
    os.chmod(folder, 0o700)
    private(folder + "/agent.py", source)
    allow = json.loads(allow)
    if allow:
        # The session's proxy, before its sandbox (which binds the proxy's socket in): the
        # very module the local supervisor runs (session/egress.py), from its source.
        private(folder + "/forward.py", forward)
        egress = types.ModuleType("egress")
        exec(compile(egress_source, "egress.py", "exec"), egress.__dict__)
        try:
            egress_handle = egress.start(
                folder, allow, socket_path=folder + "/" + EGRESS_NAME, log_path=log
            )
        except egress.EgressError as exc:
            print("switchyard: %s" % exc, file=sys.stderr)
            finish()
            sys.exit(1)
    sock = listen(folder + "/" + SOCKET_NAME)
    if sock.fileno() != LISTEN_FD:
        os.dup2(sock.fileno(), LISTEN_FD)
        sock.close()
    else:
        sock.detach()
    return cmd, (LISTEN_FD,)
def finish():
    if egress_handle is not None:
        egress.stop(egress_handle)
    for name in SESSION_FILES:
        try:
            os.unlink(folder + "/" + name)
        except OSError:
            pass
    try:
        os.rmdir(folder)
    except OSError:
        pass
""".replace("EGRESS_NAME", repr(EGRESS_SOCKET_NAME)).replace(
    "SESSION_FILES",
    repr(
        (
            box.SOCKET_NAME,
            box.SOCKET_NAME + box.PASSING_SUFFIX,
            "agent.py",
            "forward.py",
            EGRESS_SOCKET_NAME,
            egress.CONF_NAME,
            egress.FILTER_NAME,
        )
    ),
)
SESSION_WATCHER = watcher_program(_BOX + _HOOKS)
NO_PYTHON = "python3 is not installed on this node: a live sandbox's agent cannot run"
