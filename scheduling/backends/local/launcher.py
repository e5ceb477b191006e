"""The launcher: one resident process per job root that forks each job's supervisor.

A new interpreter per job cost ~10 ms of CPU of the ~17 ms a local job's supervisor, sandbox
and command cost in all (docs/benchmarks.md). The launcher imports the supervisor (`shim.py`)
and its watchdog once, then forks a supervisor per job: a fork of this small process costs
well under a millisecond. The backend starts it the first time it starts a job
(`launch.start_supervisors`), as `python -I -S -c 'import launcher …' <root>`, with the same
environment a supervisor gets (PATH and LANG only).

    root/run/               0700: only the portal's user reaches it
        launcher.sock       the Unix socket the backend sends job keys to
        launcher.lock       flock'ed by the one launcher of this root while it serves
        launcher.pid        "<pid> <start time>" of that launcher

Protocol: the backend connects, writes for each job a line `<key> <n>` followed by the `n`
bytes of its launch plan (marshal), and closes its writing side; the launcher answers one
line per job, in order: `ok <pid> <start time>` once that job's supervisor is forked with
that plan and its shim.pid written, or `error <reason>` (a request it cannot read: one
`error` line). A launcher whose code
changed on disk since it started (an upgrade) answers `stale` and exits; the backend then
starts a new one. Only the launcher's own user may connect (the folder is 0700 and the
peer's uid is checked). It exits after `IDLE_S` seconds without a job, on SIGTERM, or when
its socket is removed (its root was deleted); the supervisors it forked live on without it.

A supervisor inherits nothing of the portal from it: the launcher imports nothing of the
project and reads no settings, and the child closes the socket, the lock and the wake-up
pipe, leaves the launcher's session and restores a fresh interpreter's signal dispositions
before it runs `shim.main`.
"""

from __future__ import annotations

import os
import sys
import time

IDLE_S = 120.0
CHECK_S = 2.0  # how often it looks whether its socket is still there
CODE_FILES = (
    "launcher.py",
    "shim.py",
    "jobwait.py",
    "jobwatch.py",
    "cgroup.py",
    "../jobnet.py",
    "../gpuwatch.py",
    "../session/box.py",
    "../session/egress.py",
)
MAX_REQUEST_BYTES = 1 << 20
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def run_dir(root: str) -> str:
    return os.path.join(root, "run")


def socket_path(root: str) -> str:
    return os.path.join(root, "run", "launcher.sock")


def pid_path(root: str) -> str:
    return os.path.join(root, "run", "launcher.pid")


def at_path(op, path: str):  # noqa: ANN001, ANN201 - a socket's bind or connect
    """`op(address)` on the Unix socket at `path`; a path longer than a socket address holds
    (108 bytes: a deep var folder) is reached through its folder's descriptor."""
    if len(os.fsencode(path)) < 108:
        return op(path)
    folder = os.open(os.path.dirname(path), os.O_PATH | os.O_CLOEXEC)
    try:
        return op(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    finally:
        os.close(folder)


def valid_key(key: str) -> bool:
    """The job store's key syntax (jobstore.KEY_RE), without importing `re`."""
    return 0 < len(key) <= 200 and key[0] != "-" and _KEY_CHARS.issuperset(key)


def request_bytes(jobs: dict[str, bytes]) -> bytes:
    """The request that starts these jobs: key -> its launch plan, marshalled."""
    return b"".join(
        b"%s %d\n%s" % (key.encode("ascii"), len(plan), plan) for key, plan in jobs.items()
    )


def parse_request(data: bytes) -> list[tuple[str, bytes]]:
    """(key, plan bytes) of each job in a request; ValueError if it is not one."""
    jobs, at = [], 0
    while at < len(data):
        end = data.find(b"\n", at)
        head = data[at:end].split(b" ") if end >= 0 else []
        if len(head) != 2 or not head[1].isdigit():
            raise ValueError("not a launcher request")
        size = int(head[1])
        if end + 1 + size > len(data):
            raise ValueError("a launch plan is cut short")
        jobs.append((head[0].decode("ascii", "replace"), data[end + 1 : end + 1 + size]))
        at = end + 1 + size
    return jobs


def code_stamp(here: str) -> tuple[int, ...]:
    """When this file, the supervisor and its watchdog last changed on disk."""
    return tuple(os.stat(os.path.join(here, name)).st_mtime_ns for name in CODE_FILES)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: launcher.py <root> [idle seconds]", file=sys.stderr)
        return 2
    idle_s = float(argv[2]) if len(argv) == 3 else IDLE_S
    return Launcher(os.path.abspath(argv[1]), idle_s).start()


class Launcher:
    def __init__(self, root: str, idle_s: float) -> None:
        self.root = root
        self.idle_s = idle_s
        self.here = os.path.dirname(os.path.abspath(__file__))
        self.sock_path = socket_path(root)
        self.released: set[int] = set()

    def start(self) -> int:
        """Take the root's lock, listen, and serve in a detached child; 0 once it listens
        (or when another launcher already serves this root)."""
        import fcntl
        import socket

        run = run_dir(self.root)
        os.makedirs(run, mode=0o700, exist_ok=True)
        os.chmod(run, 0o700)  # makedirs' mode is masked by the umask; this is not
        lock_fd = os.open(os.path.join(run, "launcher.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another launcher holds the root; the backend connects to it once it listens.
            os.close(lock_fd)
            return 0
        stamp = code_stamp(self.here)  # before the imports: a change during them is seen
        if os.path.lexists(self.sock_path):
            os.unlink(self.sock_path)  # a dead launcher's (we hold the lock)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        at_path(listener.bind, self.sock_path)
        os.chmod(self.sock_path, 0o600)
        listener.listen(128)
        if self.here not in sys.path:
            sys.path.insert(0, self.here)
        import jobwatch  # noqa: F401 - imported here once, instead of in every supervisor
        import shim

        shim._jobwait()  # likewise
        shim._jobnet()  # likewise, for batch jobs
        shim._box()  # likewise, for live sandboxes
        shim._cgroup()  # likewise, for jobs in control groups

        self.shim = shim
        # The backend waits for this process: it returns once the server (a child: the lock
        # and the socket go with it) is recorded, and the server goes on detached.
        child = os.fork()
        if child != 0:
            _write(pid_path(self.root), f"{child} {shim.proc_start_time(child) or 0}")
            os._exit(0)
        os.setsid()
        return self.serve(listener, lock_fd, stamp)

    def serve(self, listener, lock_fd: int, stamp: tuple[int, ...]) -> int:
        import _signal
        import select

        inode = os.stat(self.sock_path).st_ino
        wake_r, wake_w = os.pipe()
        for fd in (wake_r, wake_w):
            os.set_blocking(fd, False)
        _signal.set_wakeup_fd(wake_w)
        stopped: list[int] = []
        _signal.signal(_signal.SIGCHLD, lambda *_: None)  # wakes the select: reap
        _signal.signal(_signal.SIGTERM, lambda signo, _: stopped.append(signo))
        self.inherited: tuple = (listener, lock_fd, wake_r, wake_w)
        self.conn = None
        last_job = time.monotonic()
        try:
            while not stopped:
                idle_for = time.monotonic() - last_job
                if idle_for >= self.idle_s:
                    break
                try:
                    ready, _, _ = select.select(
                        [listener, wake_r], [], [], min(self.idle_s - idle_for, CHECK_S)
                    )
                except InterruptedError:
                    continue
                if wake_r in ready:
                    _drain(wake_r)
                _reap()
                if not _same_file(self.sock_path, inode):
                    break  # removed or replaced: this root is no longer ours to serve
                if listener in ready:
                    conn, _ = listener.accept()
                    self.conn = conn
                    try:
                        if not self.answer(conn, stamp):
                            # Stale: give the root back first, so that the backend's new
                            # launcher gets it, then say so.
                            self.give_back(inode, lock_fd)
                            conn.sendall(b"stale\n")
                            break
                    except OSError:
                        pass  # the backend went away or sent too much: its problem
                    finally:
                        conn.close()
                    last_job = time.monotonic()
        finally:
            self.give_back(inode, lock_fd)
        return 0

    def give_back(self, inode: int, lock_fd: int) -> None:
        """Remove the socket and pid file (if still ours) and release the root's lock."""
        if _same_file(self.sock_path, inode):
            os.unlink(self.sock_path)
            _unlink(pid_path(self.root))
        if lock_fd not in self.released:
            self.released.add(lock_fd)
            os.close(lock_fd)

    def answer(self, conn, stamp: tuple[int, ...]) -> bool:
        """Fork a supervisor for every key the backend sent; False if this code is stale."""
        import socket
        import struct

        conn.settimeout(5.0)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
            if len(data) > MAX_REQUEST_BYTES:
                raise OSError("request too long")
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            conn.sendall(b"error only the launcher's own user may start jobs\n")
            return True
        if code_stamp(self.here) != stamp:
            return False
        try:
            jobs = parse_request(data)
        except ValueError as exc:
            conn.sendall(f"error {exc}\n".encode())
            return True
        lines = [self.launch(key, plan) for key, plan in jobs]
        conn.sendall("".join(f"{line}\n" for line in lines).encode())
        return True

    def launch(self, key: str, plan_bytes: bytes) -> str:
        import marshal

        if not valid_key(key):
            return "error not a job key"
        jobdir = os.path.join(self.root, "jobs", key)
        if not os.path.isdir(jobdir):
            return "error no such job"
        try:
            plan = marshal.loads(plan_bytes)
        except (EOFError, ValueError, TypeError):
            plan = None
        if not isinstance(plan, dict) or not isinstance(plan.get("argv"), list):
            return "error not a launch plan"
        if _peer_gone(self.conn):
            # The backend gave up waiting: it starts none of these itself, and finds at its
            # next poll which ones were started (shim.pid). None more is.
            return "error the backend went away"
        try:
            pid = os.fork()
        except OSError as exc:
            return f"error could not start the supervisor: {exc}"
        if pid == 0:
            self._become_supervisor(jobdir, plan)  # never returns
        start = self.shim.proc_start_time(pid) or 0
        # Whole or not at all (tmp + rename): a backend that gave up waiting for this answer
        # no longer holds the store's lock, and its next poll may read this at any moment.
        _write(os.path.join(jobdir, "shim.pid"), f"{pid} {start}")
        return f"ok {pid} {start}"

    def _become_supervisor(self, jobdir: str, plan: dict) -> None:
        """In the forked child: shed the launcher, then run the job's supervisor."""
        import _signal

        code = 1
        try:
            listener, lock_fd, wake_r, wake_w = self.inherited
            _signal.set_wakeup_fd(-1)
            listener.close()
            if self.conn is not None:  # the connection that asked for this job
                self.conn.close()
            for fd in (lock_fd, wake_r, wake_w):
                os.close(fd)
            _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
            _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
            os.setsid()  # a session of its own, as when it was spawned directly
            os.chdir(jobdir)
            code = self.shim.main(["shim", jobdir], plan)
        finally:
            os._exit(code)  # never back into the launcher's loop, nor its clean-up


def _write(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(text)
    os.replace(tmp, path)


def _unlink(path: str) -> None:
    try:  # noqa: SIM105 (contextlib is an import this file avoids)
        os.unlink(path)
    except FileNotFoundError:
        pass


def _same_file(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except FileNotFoundError:
        return False


def _peer_gone(conn) -> bool:
    """Whether the backend closed its end (a timeout): POLLHUP, which a shutdown of its
    writing side alone does not raise."""
    import select

    poller = select.poll()
    poller.register(conn, select.POLLHUP)
    return bool(poller.poll(0))


def _drain(fd: int) -> None:
    try:  # noqa: SIM105
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reap() -> None:
    """Collect the supervisors that ended (they are this process's children)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


if __name__ == "__main__":
    sys.exit(main(sys.argv))
