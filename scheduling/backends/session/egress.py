"""A live sandbox's one way out, on the host: a tinyproxy of its own that lets exactly the
sandbox's egress allow-list through, reached through a Unix socket (docs/sandbox-network.md).

A sandbox's network namespace holds only its own loopback. With an allow-list ("host:port"
pairs), the trusted side that runs the session (the local backend's supervisor, the watcher of
a Slurm session job) calls `start()`, which:

1. writes a tinyproxy configuration into the session's folder: listening on 127.0.0.1 only,
   `FilterDefaultDeny` with one anchored rule per pair that matches the request's own URL
   (`http://host:port/…` for plain HTTP, `host:port` for CONNECT), `ConnectPort` for exactly the
   listed ports, no `Via` or `X-Tinyproxy` header, its log on its standard output, which is
   the session's audit file (`egress.log`, read by proxylog.py);
2. binds the Unix socket the sandbox reaches it by (bound in at SOCKET_IN_SANDBOX; the agent's
   forwarder, forward.py, turns it back into 127.0.0.1:3128 inside), owned by the job's account;
3. forks a keeper that drops to the job's account (never root: tinyproxy parses whatever the
   sandbox sends), starts tinyproxy in the foreground, waits until it accepts, then relays each
   connection of the socket to tinyproxy's port. The keeper ends tinyproxy and itself when the
   caller closes its end of the exit pipe or dies, or when tinyproxy dies.

tinyproxy filters what it is asked for, not where a name leads: a listed name is resolved by
the host when a request comes (the portal refuses, before a session starts, a list whose names
lead to its own services: network.py). `start_api_relay()` gives a batch agent task a way to the portal's sandbox
API only: each connection carries one request whose path starts with API_PREFIX, passed on
with `Connection: close`; anything else is answered 403 here.

Standard library only, and only `os` at module level (the rest when a session starts): the
supervisor's start-up counts every import and the Slurm watcher runs files like this as source
text (see jobnet.py).
"""

from __future__ import annotations

import os

TINYPROXY_MISSING = (
    "tinyproxy is not installed on this node: a sandbox with an egress allow-list has no way "
    "out without it (make system-deps)"
)
NEVER_ROOT = "the egress proxy never runs as root: give it the job's account (docs/security.md)"
BWRAP_MISSING = (
    "bubblewrap is not installed on this node: the egress proxy runs confined by it, and a "
    "sandbox with an egress allow-list has no way out without it (make system-deps)"
)
SOCKET_IN_SANDBOX = "/run/switchyard/egress.sock"
TOOL_DIRS = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")
LOG_NAME = "egress.log"
CONF_NAME = "tinyproxy.conf"
FILTER_NAME = "egress.filter"
START_TIMEOUT_S = 5.0
START_TRIES = 3  # a port picked free may be taken before tinyproxy binds it
MAX_CLIENTS = 32  # connections at once, per session
IDLE_TIMEOUT_S = 300
READY_LINE = b"Starting main loop. Accepting connections."
CHUNK = 65536
SUN_PATH_MAX = 100  # a Unix socket's address holds at most 107 bytes


class EgressError(Exception):
    """The allow-list is not valid, or the proxy could not start: the session must not start
    with a network it was not given."""


def find(name: str) -> str | None:
    for folder in TOOL_DIRS:
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    return None


def _host_ok(host: str) -> bool:
    """A DNS name (letters, digits, hyphens; dots between labels), not an IP address."""
    if not host or len(host) > 253:
        return False
    labels = host.split(".")
    for label in labels:
        if not 1 <= len(label) <= 63 or label[0] == "-" or label[-1] == "-":
            return False
        if any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in label):
            return False
    return not labels[-1].isdigit()  # 10.0.0.1 and friends are addresses, not names


def parse_allow(entries: list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    """The allow-list's (host, port) pairs, hosts lower-cased; EgressError naming the first
    entry that is not "name:port" (a raw IP, a wildcard or a port out of 1-65535 is not)."""
    pairs: list[tuple[str, int]] = []
    for entry in entries:
        host, _, port = entry.rpartition(":") if isinstance(entry, str) else ("", "", "")
        host = host.lower()
        ok = _host_ok(host) and port.isdigit() and port[0] != "0" and int(port) <= 65535
        if not ok:
            raise EgressError(
                f"egress: expected entries of the form host:port (a DNS name, not an IP "
                f"address; a port 1-65535), got {entry!r}"
            )
        if (host, int(port)) not in pairs:
            pairs.append((host, int(port)))
    return pairs


def filter_rules(pairs: list[tuple[str, int]]) -> str:
    """tinyproxy's filter file (extended regular expressions, matched against the request's
    URL): each pair's plain-HTTP URL and its CONNECT target, anchored so that nothing but that
    exact host and port matches (`http://h:p@other/` and `h:p.other` do not)."""
    rules = []
    for host, port in pairs:
        name = host.replace(".", "\\.")
        ports = f"(:{port})?" if port == 80 else f":{port}"
        rules += [f"^http://{name}{ports}/", f"^{name}:{port}$"]
    return "".join(f"{rule}\n" for rule in rules)


def proxy_config(port: int, filter_path: str, pairs: list[tuple[str, int]]) -> str:
    """tinyproxy's configuration: 127.0.0.1 only, deny what the filter does not list, no
    header that tells the far side about this host, the log on standard output."""
    lines = [
        f"Port {port}",
        "Listen 127.0.0.1",
        "Allow 127.0.0.1",
        f"Timeout {IDLE_TIMEOUT_S}",
        f"MaxClients {MAX_CLIENTS}",
        "LogLevel Info",  # its refusals of CONNECT ports are logged at Info
        "Syslog Off",
        "DisableViaHeader Yes",
        "XTinyproxy No",
        f'Filter "{filter_path}"',
        "FilterType ere",
        "FilterURLs Yes",
        "FilterDefaultDeny Yes",
        *(f"ConnectPort {p}" for p in sorted({p for _, p in pairs})),
    ]
    return "".join(f"{line}\n" for line in lines)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listen_unix(path: str, run_as: list[int] | tuple[int, int] | None):
    """A listening Unix socket at `path` (replacing a stale one) that only `run_as` (the job's
    account) may connect to: mode 0600, its owner set before it listens."""
    import socket

    try:  # noqa: SIM105 (contextlib is an import this file avoids)
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = None
    try:
        address = path
        if len(os.fsencode(path)) > SUN_PATH_MAX:  # bound through its folder instead
            folder = os.open(os.path.dirname(path), os.O_PATH | os.O_CLOEXEC)
            address = f"/proc/self/fd/{folder}/{os.path.basename(path)}"
        listener.bind(address)
        os.chmod(path, 0o600)
        if run_as and os.geteuid() == 0:
            os.chown(path, run_as[0], run_as[1])
        listener.listen(64)
    except OSError as exc:
        listener.close()
        raise EgressError(f"egress: the socket {path} could not be made: {exc}") from None
    finally:
        if folder is not None:
            os.close(folder)
    return listener


def start(
    folder: str,
    allow: list[str] | tuple[str, ...],
    *,
    socket_path: str,
    run_as: list[int] | tuple[int, int] | None = None,
    tinyproxy: str | None = None,
    log_path: str | None = None,
) -> tuple[int, int, int]:
    """Start the session's proxy and its relay (see above); `folder` is the session's own (the
    configuration and the log go there; `run_as` must be able to read it), `log_path` the
    log's place when it is to be elsewhere (a Slurm session keeps it in its job's folder,
    which outlives the node's). `run_as` is the (uid, gid) they run as; None runs them as this
    process, which then must not be root.
    Returns the handle `stop()` takes: (keeper pid, write end of its exit pipe, proxy port)."""
    pairs = parse_allow(allow)
    if not pairs:
        raise EgressError("egress: an empty allow-list means no network: start no proxy")
    if not run_as and os.geteuid() == 0:
        raise EgressError(NEVER_ROOT)
    if run_as and int(run_as[0]) == 0:
        raise EgressError(NEVER_ROOT)
    tinyproxy = tinyproxy or find("tinyproxy")
    if tinyproxy is None or not os.access(tinyproxy, os.X_OK):
        raise EgressError(TINYPROXY_MISSING)
    bwrap = find("bwrap")
    if bwrap is None:
        raise EgressError(BWRAP_MISSING)
    filter_path = os.path.join(folder, FILTER_NAME)
    _write(filter_path, filter_rules(pairs))
    log_path = log_path or os.path.join(folder, LOG_NAME)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    log = os.open(log_path, flags, 0o640)
    reader = os.open(log_path, os.O_RDONLY | os.O_NOFOLLOW)
    os.lseek(reader, 0, os.SEEK_END)  # the keeper reads what tinyproxy says from here
    listener = listen_unix(socket_path, run_as)
    why = "it did not start"
    try:
        for _ in range(START_TRIES):
            port = _free_port()
            conf = os.path.join(folder, CONF_NAME)
            _write(conf, proxy_config(port, filter_path, pairs))
            argv = confined(bwrap, [tinyproxy, "-d", "-c", conf], folder)
            keeper = (argv, port, reader)
            handle, why = spawn_keeper(listener, log, run_as, _proxy_keeper, keeper, (log, reader))
            if handle is not None:
                return handle[0], handle[1], port
            if "listening" not in why and "Address already in use" not in why:
                break
    finally:
        listener.close()  # the keeper holds its own copies
        os.close(log)
        os.close(reader)
    raise EgressError(f"egress: tinyproxy did not start: {why}")


def stop(handle: tuple[int, ...]) -> None:
    """End the session's proxy and relay: the keeper ends tinyproxy once its exit pipe closes;
    after at most 2 s whatever is left of its process group is killed, then it is reaped."""
    import time

    pid, exit_w = handle[0], handle[1]
    try:  # noqa: SIM105 (contextlib is an import this file avoids)
        os.close(exit_w)
    except OSError:
        pass
    end = time.monotonic() + 2
    try:
        # WNOWAIT: an ended keeper stays unreaped until its group is killed, so that the group
        # id cannot be another process's yet.
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if time.monotonic() > end:
                break
            time.sleep(0.002)
    except ChildProcessError:
        return
    try:  # noqa: SIM105 (tinyproxy too, if the keeper could not end it)
        os.killpg(pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:  # noqa: SIM105
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def confined(bwrap: str, argv: list[str], folder: str) -> list[str]:
    """`argv` (tinyproxy) in namespaces of its own but for the host's network. It parses
    whatever the sandbox sends, and runs as the job's account, which every sandbox of the
    site's service account shares: on the host it could read any process of that account
    (another sandbox's files through /proc/<pid>/root, its memory) and reach the account's
    sockets under /tmp (a Slurm session's agent). Here it sees a /proc of its own, an empty
    /tmp, the host's files read-only (its session's `folder`, with its configuration, even
    where that is under /tmp), and ends with its keeper."""
    return [
        bwrap,
        "--unshare-all",
        "--share-net",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/var/tmp",
        "--ro-bind",
        folder,
        folder,
        "--",
        *argv,
    ]


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)  # whatever the umask: tinyproxy reads it as the job's account
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def spawn_keeper(listener, log, run_as, serve, args, keep=()) -> tuple[tuple[int, int] | None, str]:
    """Fork the keeper: its own session and process group, as `run_as`, running
    `serve(listener, log, ready_w, exit_r, *args)` with no descriptor of this process but those
    and `keep`. Returns ((pid, exit_w), "") once it says
    it is ready, or (None, why)."""
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the keeper: only os._exit from here
        code = 1
        try:
            os.close(ready_r)
            os.close(exit_w)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)  # nothing the sandbox sends ends up in the caller's streams
            _close_others((listener.fileno(), ready_w, exit_r, *keep))
            # What the keeper needs, loaded while the interpreter's files are still readable
            # (the job's account may not read them): its modules and the codec names use.
            import select  # noqa: F401
            import threading  # noqa: F401
            import time  # noqa: F401

            "localhost".encode("idna")
            if run_as:
                os.setgroups([])
                os.setgid(int(run_as[1]))
                os.setuid(int(run_as[0]))
            serve(listener, log, ready_w, exit_r, *args)
            code = 0
        except BaseException as exc:  # noqa: BLE001 (a forked child must never return)
            try:  # noqa: SIM105
                os.write(ready_w, f"error {exc}".encode(errors="replace")[:4000])
            except OSError:
                pass
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(exit_r)
    said = b""
    while True:
        chunk = os.read(ready_r, 4096)
        if not chunk:
            break
        said += chunk
        if said == b"ok":
            break
    os.close(ready_r)
    if said == b"ok":
        return (pid, exit_w), ""
    os.close(exit_w)
    try:  # noqa: SIM105
        os.killpg(pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    os.waitpid(pid, 0)
    return None, said.decode(errors="replace").removeprefix("error ") or "it exited"


def _close_others(keep) -> None:
    """Close every descriptor but 0-2 and `keep` (the caller's others are not the keeper's)."""
    low = 3
    for fd in sorted(k for k in keep if k is not None and k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 65536)


def _proxy_keeper(listener, log, ready_w, exit_r, argv, port, reader) -> None:
    """In the keeper: start tinyproxy, wait until it accepts, say so, relay until told to end."""
    import time

    null = os.open(os.devnull, os.O_RDONLY)
    proxy = os.fork()
    if proxy == 0:
        try:
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.closerange(3, 65536)
            os.execve(argv[0], argv, {"TZ": "UTC", "PATH": "/usr/bin:/bin", "LANG": "C"})
        finally:
            os._exit(127)
    os.close(null)
    seen = b""
    end = time.monotonic() + START_TIMEOUT_S
    while READY_LINE not in seen:
        seen = (seen + os.read(reader, CHUNK))[-8192:]
        done, status = os.waitpid(proxy, os.WNOHANG)
        if done or time.monotonic() > end:
            if not done:
                os.kill(proxy, 9)
                os.waitpid(proxy, 0)
            lines = [ln for ln in seen.decode(errors="replace").splitlines() if ln.strip()]
            raise EgressError(" / ".join(lines[-3:]) or "no word from tinyproxy in time")
        time.sleep(0.0005)
    os.close(reader)
    os.write(ready_w, b"ok")
    os.close(ready_w)

    def connect():
        import socket

        return socket.create_connection(("127.0.0.1", port), timeout=10)

    # Set once tinyproxy is reaped: its pid is not to be signalled after that.
    ended: list[bool] = []

    def gone() -> bool:
        if not ended and os.waitpid(proxy, os.WNOHANG)[0]:
            ended.append(True)
        return bool(ended)

    try:
        serve(listener, exit_r, connect, gone)
    finally:
        if not ended:
            os.kill(proxy, 15)
            end = time.monotonic() + 1
            while not gone() and time.monotonic() < end:
                time.sleep(0.005)
            if not ended:
                os.kill(proxy, 9)
                os.waitpid(proxy, 0)


def serve(listener, exit_r, connect, gone, handle=None) -> None:
    """Accept on `listener` until `exit_r` reads EOF or `gone()`; each connection in a thread
    of its own, at most MAX_CLIENTS at once: spliced to `connect()`, or given to `handle`."""
    import select
    import threading

    slots = threading.BoundedSemaphore(MAX_CLIENTS)

    def one(conn) -> None:
        try:
            if handle is not None:
                handle(conn)
            else:
                upstream = connect()
                splice(conn, upstream)
        except OSError:
            pass
        finally:
            conn.close()
            slots.release()

    while True:
        ready, _, _ = select.select([listener, exit_r], [], [], 0.5)
        if exit_r in ready or gone():
            return
        if listener in ready:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            if not slots.acquire(blocking=False):
                conn.close()  # the session's share is taken: the client sees a reset
                continue
            threading.Thread(target=one, args=(conn,), daemon=True).start()


def splice(a, b, first: bytes = b"", limit: int | None = None) -> None:
    """Copy both ways between sockets `a` (the client) and `b` until both have ended; `first`
    is sent to `b` before; with `limit`, no more than that many bytes of `a` are passed on."""
    import threading

    def pump(src, dst, budget: int | None) -> None:
        try:
            while budget is None or budget > 0:
                data = src.recv(CHUNK if budget is None else min(CHUNK, budget))
                if not data:
                    break
                dst.sendall(data)
                if budget is not None:
                    budget -= len(data)
            dst.shutdown(1)  # SHUT_WR: the other side sees the end
        except OSError:
            pass

    with b:
        if first:
            b.sendall(first)
        back = threading.Thread(target=pump, args=(b, a, None), daemon=True)
        back.start()
        pump(a, b, limit)
        back.join()
