"""A live sandbox's launch plan on the local backend (docs/sandboxes.md): what changes from a
batch job's (launch.py) when `spec.session_idle_s` is set.

Its command is the agent (session/agent.py, read-only at box.AGENT), listening on a socket
the supervisor binds at `<jobdir>/session.sock` (0600: only the portal's account connects)
and hands into the sandbox as a descriptor. Its working folder and HOME is a tmpfs of its
own at box.HOME, sized by the memory request like its /tmp; it has no job folders on the host
and no storage areas, and the usual network namespace with nothing in it; with an egress
allow-list, its one way out is a proxy of its own that the supervisor starts before the
sandbox (session/egress.py, docs/sandbox-network.md). Its image, if any, must have python3.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from scheduling.backends.imagebox import IMAGE_PYTHONS, CannotRun, image_python, no_python
from scheduling.backends.images import CachedImage
from scheduling.backends.local.jobstore import JobStore
from scheduling.backends.session import box, egress
from scheduling.decisions.images import container_env
from scheduling.spec import TaskSpec

SESSION_DIR = os.path.dirname(box.__file__)
# Replaced in the argv by the supervisor with the descriptor it binds (shim.py).
LISTEN_SLOT = "{listen-fd}"


def agent_files(root: str) -> tuple[str, str]:
    """The agent and its egress forwarder, copied where the job's account can read them:
    `<root>/session/<hash>/` (bubblewrap binds them as that account, which cannot pass into
    the portal's code). A new version goes beside the old, so that a running sandbox keeps
    the files it was started with."""
    names = ("agent.py", "forward.py")
    data = {}
    for name in names:
        with open(os.path.join(SESSION_DIR, name), "rb") as f:
            data[name] = f.read()
    digest = hashlib.sha256(b"\0".join(data[name] for name in names)).hexdigest()[:16]
    folder = os.path.join(root, "session", digest)
    paths = tuple(os.path.join(folder, name) for name in names)
    if not all(os.path.exists(path) for path in paths):
        os.makedirs(folder, exist_ok=True)
        for at in (os.path.dirname(folder), folder):
            os.chmod(at, 0o755)
        for name, path in zip(names, paths, strict=True):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data[name])
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
    return paths[0], paths[1]


@dataclass(frozen=True, slots=True)
class SessionParts:
    argv: list[str]
    env: dict[str, str]
    mounts: list[str]  # bubblewrap's, after the job's own (sandbox_argv's `extra`)
    needed: list[str]  # what an image's system must leave room for (rootfs_binds)
    # The plan's "session": the agent's socket and, with egress, the proxy's allow-list,
    # folder and socket (the supervisor starts the proxy: session/egress.py).
    plan: dict[str, Any]
    tmpfs: list[str]  # its home, memory like /tmp: counted by the watchdog (jobwatch.py)


def parts(
    store: JobStore,
    key: str,
    spec: TaskSpec,
    env: dict[str, str],
    *,
    memory_bytes: int,
    image: CachedImage | None,
) -> SessionParts:
    """The agent's command, its environment and its mounts; CannotRun for an image without
    python3 or an allow-list that is not one."""
    if spec.session_idle_s is None:
        raise ValueError("not a session")
    env = {**env, "HOME": box.HOME, "PWD": box.HOME}
    if image is not None:
        if image_python(str(image.rootfs)) is None:
            raise CannotRun(no_python(spec.image or image.reference))
        # The image's Env under the session's own (its PATH finds its python3).
        given = {name for name, _ in (*spec.env, *spec.secret_env)}
        base = {k: v for k, v in env.items() if k in ("PATH", "LANG") and k not in given}
        task = tuple((k, v) for k, v in env.items() if k not in base)
        env = {**base, **dict(container_env(image.config.env, task))}
        env.update(HOME=box.HOME, PWD=box.HOME, TMPDIR="/tmp")
    agent, forward = agent_files(store.root)
    plan: dict[str, Any] = {"socket": store.path(key, box.SOCKET_NAME)}
    mounts = box.mounts(agent, home_bytes=memory_bytes)
    if spec.egress:
        try:
            egress.parse_allow(spec.egress)
        except egress.EgressError as exc:
            raise CannotRun(str(exc)) from None
        folder = store.path(key, "egress")  # the proxy's: its configuration and audit log
        plan.update(
            egress=list(spec.egress),
            egress_folder=folder,
            egress_socket=os.path.join(folder, "egress.sock"),
        )
        mounts = box.mounts(
            agent,
            home_bytes=memory_bytes,
            forward_file=forward,
            egress_socket=plan["egress_socket"],
        )
    return SessionParts(
        argv=box.agent_argv(spec.session_idle_s, egress=bool(spec.egress), listen_fd=LISTEN_SLOT),
        env=env,
        mounts=mounts,
        needed=[box.HOME, os.path.dirname(box.AGENT)],
        plan=plan,
        tmpfs=[box.HOME],
    )


@dataclass(frozen=True, slots=True)
class RelayParts:
    prefix: list[str]  # before the job's command (after an image's runner)
    mounts: list[str]
    needed: list[str]
    plan: dict[str, str]  # the plan's "api_relay": apirelay.start()'s arguments (shim.py)


def api_relay(
    store: JobStore,
    key: str,
    spec: TaskSpec,
    env: dict[str, str],
    web: str,
    image: CachedImage | None,
) -> RelayParts | None:
    """A batch task that uses live sandboxes (`sandboxes: true`) reaches their API, and nothing
    else of the portal, through a relay the supervisor starts before the sandbox
    (session/apirelay.py) to the portal's web address `web`: its socket bound in read-only,
    the command run under forward.py, which serves it at 127.0.0.1:API_PORT inside
    (docs/sandbox-network.md); `env` gets SWITCHYARD_URL. None for any other task; CannotRun
    for an image without python3 or no address."""
    if not spec.sandboxes:
        return None
    if not web:
        raise CannotRun(
            "sandboxes: the portal's web address for the sandbox API's relay is not set "
            "(SWITCHYARD_WEB_ADDR)"
        )
    python: str | None = "python3"
    if image is not None and (python := image_python(str(image.rootfs))) is None:
        raise CannotRun(
            f"image {image.reference} has no python3 (looked for {', '.join(IMAGE_PYTHONS)}): "
            "a task with `sandboxes: true` reaches the sandbox API through a forwarder run "
            "with the image's own python3"
        )
    _, forward = agent_files(store.root)
    socket = store.path(key, "api.sock")
    to = f"{box.API_PORT}={box.API_SOCKET}"
    env["SWITCHYARD_URL"] = f"http://127.0.0.1:{box.API_PORT}"
    return RelayParts(
        prefix=[str(python), "-I", "-S", box.FORWARD, "--to", to, "--"],
        mounts=["--ro-bind", forward, box.FORWARD, "--ro-bind", socket, box.API_SOCKET],
        needed=[os.path.dirname(box.FORWARD)],
        plan={"socket_path": socket, "web": web},
    )
