"""A batch job's network, on the node it runs on: its own namespace, connected to the outside
through slirp4netns, with the control plane out of reach (docs/security.md).

The sandbox (sandbox.py) always gives a job a network namespace of its own. Agent and sandbox
tasks keep it empty. For a batch job the runner (the local backend's supervisor, shim.py, or
the watcher of a Slurm batch script, slurm/watch.py) starts bubblewrap with `--info-fd` and
`--block-fd`, so the sandbox waits, set up but before the job's command runs, while
`connect()`:

1. starts slirp4netns as the job's own account (never root: it parses whatever the job
   sends) with `--disable-host-loopback`, so the gateway it gives the job (10.0.2.2) does
   not lead to the host's 127.0.0.1; `--exit-fd` ends it when the runner closes its end
   (or dies), `--ready-fd` says when the job's `tap0` is up;
2. adds a `prohibit` route inside the namespace for each network the portal listed (its
   database, broker, web server and the operator's list) and for every IPv4 address of this
   node (a service bound to 0.0.0.0 would otherwise be reachable at the node's own address
   through slirp), as the job's account through `nsenter` and `ip`; the job itself cannot
   change them (no capabilities, no user namespace of its own).

The job's network is IPv4 only (slirp4netns without --enable-ipv6): IPv6 has no route at all.
Only then is the sandbox released. Anything that fails fails the job with the reason: it never
runs on the host's network.

This file imports only `os` at module level (fcntl and select when a job is connected): the
supervisor's start-up counts every import. The Slurm batch script runs it as source text
inside its watcher (`python3 -I -S -c`), so it must stay standard library and self-contained.
"""

from __future__ import annotations

import os

SLIRP_MISSING = (
    "slirp4netns is not installed on this node: a batch job never runs on the host's network "
    "(docs/security.md)"
)
# Where the tools are looked up: never the job's or the portal's PATH.
TOOL_DIRS = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")
TOOL_ENV = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C"}
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
SETUP_TIMEOUT_S = 10.0
NETWORK_ARG_NONE = "none"  # the watcher's argument for a job without network


class NetworkError(Exception):
    """The job's network could not be set up: the job must not run."""


def find(name: str) -> str | None:
    for folder in TOOL_DIRS:
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    return None


def host_addresses() -> list[str]:
    """Every IPv4 address of this machine's interfaces (from /proc/net/fib_trie), loopback
    included."""
    try:
        with open("/proc/net/fib_trie", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found: list[str] = []
    for before, line in zip(lines, lines[1:], strict=False):
        if line.strip() == "/32 host LOCAL":
            address = before.strip().removeprefix("|-- ")
            if address not in found:
                found.append(address)
    return found


def route_batch(blocked: list[str] | tuple[str, ...]) -> str:
    """`ip -batch` input: a prohibit route for each IPv4 network of `blocked` and each address
    of this node. Loopback is left out: inside the namespace it is the job's own."""
    seen: list[str] = []
    for net in [*blocked, *host_addresses()]:
        if ":" in net or net.startswith("127."):
            continue  # no IPv6 route exists; 127/8 is the namespace's own loopback
        net = net if "/" in net else f"{net}/32"
        if net not in seen:
            seen.append(net)
    return "".join(f"route replace prohibit {net}\n" for net in seen)


def connect(
    pid: int,
    blocked: list[str] | tuple[str, ...],
    run_as: list[int] | None = None,
    *,
    slirp: str | None = None,
) -> tuple[int, int]:
    """Connect the network namespace of the sandbox whose init is `pid` (see above).

    `run_as` is the (uid, gid) to run slirp4netns and `ip` as (None: as this process);
    `slirp` the path of slirp4netns (None: looked up). Returns the handle `disconnect()`
    takes: (slirp4netns's pid, the write end of its exit pipe).
    """
    slirp = slirp or find("slirp4netns")
    nsenter, ip = find("nsenter"), find("ip")
    if slirp is None or not os.access(slirp, os.X_OK):
        raise NetworkError(SLIRP_MISSING)
    if nsenter is None or ip is None:
        raise NetworkError("nsenter (util-linux) and ip (iproute2) are needed on this node")
    import fcntl

    try:
        net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NetworkError(f"the sandbox's network namespace is gone: {exc}") from None
    try:
        # bubblewrap runs the job in a user namespace nested in the one that owns the network
        # namespace: the tools must join the owner to be allowed to configure it.
        user = fcntl.ioctl(net, NS_GET_USERNS)
    except OSError as exc:
        os.close(net)
        raise NetworkError(f"the sandbox's user namespace could not be found: {exc}") from None
    ns = (f"/proc/self/fd/{user}", f"/proc/self/fd/{net}")
    try:
        _wait_set_up(pid, os.fstat(user).st_ino)
    except NetworkError:
        os.close(net)
        os.close(user)
        raise
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    try:
        slirp_pid, err_r = _spawn(
            [
                slirp,
                "--configure",
                "--disable-host-loopback",
                f"--ready-fd={ready_w}",
                f"--exit-fd={exit_r}",
                f"--userns-path={ns[0]}",
                "--netns-type=path",
                ns[1],
                "tap0",
            ],
            run_as,
            inherit=(ready_w, exit_r, net, user),
        )
        os.close(ready_w)
        os.close(exit_r)
        ready = _read_within(ready_r, SETUP_TIMEOUT_S)
        if ready != b"1":
            os.close(exit_w)
            os.kill(slirp_pid, 9)  # if it still runs, it hangs
            why = _finish(slirp_pid, err_r) or "it exited"
            raise NetworkError(f"slirp4netns did not connect the job's network: {why}")
        os.close(err_r)  # what it says from now on ("exiting") is not needed
        routes = route_batch(blocked)
        in_r, in_w = os.pipe()
        os.write(in_w, routes.encode("ascii"))  # well within a pipe's buffer
        os.close(in_w)
        ip_pid, ip_err = _spawn(
            [nsenter, f"--user={ns[0]}", f"--net={ns[1]}", "--preserve-credentials", ip]
            + ["-batch", "-"],
            run_as,
            inherit=(net, user),
            stdin=in_r,
        )
        os.close(in_r)
        routes_error = _finish(ip_pid, ip_err)
        if routes_error is not None:
            disconnect((slirp_pid, exit_w))
            raise NetworkError(f"the job's routes could not be set: {routes_error}")
    finally:
        os.close(net)
        os.close(user)
        os.close(ready_r)
    return slirp_pid, exit_w


def release(
    pid: int, block_w: int, network: dict, run_as: list[int] | None = None
) -> tuple[int, int]:
    """connect() the sandbox waiting on `block_w` ({"blocked": [...], "slirp4netns": path or
    None}), then let it run; if its network cannot be set up, kill it (bwrap then exits) and
    raise NetworkError. Returns connect()'s handle."""
    try:
        handle = connect(pid, network["blocked"], run_as, slirp=network.get("slirp4netns"))
        os.write(block_w, b"1")
        return handle
    except NetworkError:
        try:  # noqa: SIM105 (contextlib is an import this file avoids)
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
        raise
    finally:
        os.close(block_w)


def disconnect(handle: tuple[int, int]) -> None:
    """End the job's slirp4netns (it exits once its exit pipe closes) and reap it."""
    import time

    pid, exit_w = handle
    try:  # noqa: SIM105 (contextlib is an import this file avoids)
        os.close(exit_w)
    except OSError:
        pass
    end = time.monotonic() + 2
    try:
        while os.waitpid(pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > end:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return
            time.sleep(0.005)
    except ChildProcessError:
        pass


def _wait_set_up(pid: int, owner: int) -> None:
    """Wait until bubblewrap has set up the namespaces it reported (--info-fd says the pid
    at once, while the sandbox still brings up its loopback and maps the job's account).

    Before that, slirp4netns's loopback would race bubblewrap's (which then fails), and `ip`
    would run unmapped (exec drops an unmapped process's capabilities). The sandbox enters its
    nested user namespace (made for --dev, which sandbox.py always passes) only after both,
    just before it waits on --block-fd: that is the sign."""
    import time

    end = time.monotonic() + SETUP_TIMEOUT_S
    while True:
        try:
            if os.stat(f"/proc/{pid}/ns/user").st_ino != owner:
                return
        except OSError as exc:
            raise NetworkError(f"the sandbox ended while its network was set up: {exc}") from None
        if time.monotonic() > end:
            raise NetworkError("the sandbox was not set up in time")
        time.sleep(0.0005)


def _spawn(
    argv: list[str],
    run_as: list[int] | None,
    *,
    inherit: tuple[int, ...],
    stdin: int | None = None,
) -> tuple[int, int]:
    """fork + exec `argv` as `run_as`, keeping `inherit` open; its stdout to /dev/null.
    Returns (pid, the read end of a pipe holding its stderr)."""
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    pid = os.fork()
    if pid == 0:  # only exec or _exit from here
        try:
            os.dup2(stdin if stdin is not None else null, 0)
            os.dup2(null, 1)
            os.dup2(err_w, 2)
            if run_as:
                os.setgroups([])
                os.setgid(run_as[1])
                os.setuid(run_as[0])
            for fd in inherit:
                os.set_inheritable(fd, True)
            os.execve(argv[0], argv, TOOL_ENV)
        except BaseException:
            os.write(2, f"could not run {argv[0]}\n".encode())
        finally:
            os._exit(127)
    os.close(err_w)
    os.close(null)
    return pid, err_r


def _read_within(fd: int, timeout_s: float) -> bytes:
    import select

    if not select.select([fd], [], [], timeout_s)[0]:
        return b""
    return os.read(fd, 64)


def _finish(pid: int, err_r: int) -> str | None:
    """Wait for a tool (killed after SETUP_TIMEOUT_S); None if it succeeded, else what it
    said."""
    import select
    import time

    err, ended = b"", False
    end = time.monotonic() + SETUP_TIMEOUT_S
    while (left := end - time.monotonic()) > 0 and select.select([err_r], [], [], left)[0]:
        chunk = os.read(err_r, 4096)
        if not chunk:
            ended = True  # its stderr closed: it is exiting
            break
        err += chunk
    os.close(err_r)
    if not ended:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    if not ended:
        return f"no answer within {SETUP_TIMEOUT_S:.0f} s"
    if os.waitstatus_to_exitcode(status) == 0:
        return None
    lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    # slirp4netns says why, then "child failed(1)" or the like: the last few lines.
    return "; ".join(lines[-3:]) or f"exit status {os.waitstatus_to_exitcode(status)}"
