"""The supervisor of one local job: `main([_, jobdir])`.

The local backend starts one of these per job, detached (its own session, no inherited
descriptors, an almost empty environment): forked by the root's launcher (`launcher.py`),
which has this module imported already, or else as `python -I -S -c 'import shim …'
<jobdir>`. It runs as the worker's user (root on a shared machine) and starts the job's command in the sandbox as the job's own account, with
its groups, gid and uid dropped before exec; it enforces the walltime, honours the cancel
marker, watches the job's memory, processes and folder (`jobwatch.py`), copies its output
into output.log up to the cap, and writes the job's state to `<jobdir>/state.json`.

Start-up speed is the scheduling latency users see (submit -> running), and on this machine
every stdlib import counts (`json` alone pulls in `re` and `enum`: ~30 ms; Django ~200 ms).
So this file imports nothing from the project, and until the child runs it uses only `os`,
`sys`, `_signal` and the built-in `marshal`: the plan comes from the launcher (or as
`launch.marshal` beside the job), the child is started with a bare fork/exec, `state.json` is
written by the small JSON writer below. What a job needs until its command runs is here, in
the one module every start loads; the wait loop (`jobwait.py`), a batch job's network
(`jobnet.py`) and its control group (`cgroup.py`) are imported by path when needed (already
imported in a launcher's fork). The backend imports this file as the module `shim`;
`python -I -S shim.py <jobdir>` works too, only slower.

bwrap's environment is exactly `plan["env"]`, the site's own (PATH, LANG), and this
process's own never reaches it; the job's (`plan["job_env"]`: the task's env, its image's
Env) is set only inside the sandbox, by bwrap's --clearenv and --setenv read from a memfd
(--args): neither an image nor a task can set what the host's bwrap runs with (LD_PRELOAD),
and no value shows on bwrap's command line.
"""

from __future__ import annotations

import _signal  # the built-in module: `signal` would import enum (start-up time)
import marshal
import os
import resource  # a small built-in: the job tree's CPU time
import sys
import time

DEFAULT_GRACE_S = 5.0
BWRAP_MISSING = "bubblewrap (bwrap) is not installed: tasks never run unsandboxed"
IMAGE_EVICTED = "the job's image was removed from this node's cache before it started"
RUN_AS_ROOT = "refusing to run a job as root: no Unix account to run it as (docs/security.md)"


def now_iso() -> str:
    """UTC now in ISO 8601 (what datetime.fromisoformat reads), without importing datetime."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}+00:00"


def proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or None if gone.

    A (pid, start time) pair names one process for good; a pid alone may be reused.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    if rest[0] in (b"Z", b"X"):  # finished; only its parent's wait is missing
        return None
    return int(rest[19])


def _json(value: object) -> str:
    """JSON for the plain values a state holds (str, int, float, bool, None, list, dict)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        s = value.replace("\\", "\\\\").replace('"', '\\"')
        return '"' + "".join(c if c >= " " else f"\\u{ord(c):04x}" for c in s) + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json(str(k))}: {_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def write_state(path: str, state: dict[str, object]) -> None:
    # tmp + os.replace: a reader in another process sees the old file or the new, never half.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(_json(state))
    os.replace(tmp, path)


class Shim:
    def __init__(self, jobdir: str, plan: dict | None = None) -> None:
        self.jobdir = jobdir
        self.state_path = os.path.join(jobdir, "state.json")
        self.marker_path = os.path.join(jobdir, "cancel")
        if plan is None:  # spawned directly: the backend wrote it beside the job
            with open(os.path.join(jobdir, "launch.marshal"), "rb") as f:
                plan = marshal.load(f)
        self.plan = plan
        # While this supervisor lives it is the only writer of state.json, so it starts from
        # the state the backend wrote when it spawned us instead of re-reading (and parsing).
        self.state = dict(self.plan["state"])
        self.state["shim_pid"] = os.getpid()
        self.state["shim_start"] = proc_start_time(os.getpid())
        self.terminated_by: int | None = None  # a signal sent to this supervisor itself
        self.sandbox: tuple[int, int | None] | None = None  # (pid, start) of the sandbox init
        self.watch = None  # the watchdog (jobwatch.Limits) once the job runs
        self.net: tuple[int, int] | None = None  # a batch job's slirp4netns (jobnet.py)
        self.image_fd: int | None = None  # the pin on the job's image (pin_image)
        self.listen_fd = -1  # a live sandbox's listening socket, until the sandbox has it
        self.egress: tuple[int, ...] | None = None  # its proxy (session/egress.py), if any
        self.cgroups: list[str] = []  # the job's own control groups (cgroup.py), if any
        self.claimed_at = 0.0  # when a warm sandbox was handed to a session (jobwait.py)
        self.warm_state_path = ""  # then: the warm sandbox's own state, ended with the session

    def update_state(self, **fields: object) -> None:
        self.state.update(fields)
        write_state(self.state_path, self.state)

    def finish(self, state: str, reason: str, exit_code: int | None = None) -> None:
        # What the task really used, beside what it asked for (docs/console.md): the CPU
        # time the watchdog last saw in the job's tree (the sandbox's init keeps what its
        # reaped processes used; its own end loses it), or the rusage of what this supervisor
        # waited for, whichever is more.
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        watched = self.watch
        if self.egress is not None:
            _egress().stop(self.egress)
            self.egress = None
        session = self.plan.get("session")
        if session:  # the portal's next call finds no sandbox (SessionGone), not a hang
            try:  # noqa: SIM105 (contextlib is an import this file avoids)
                os.unlink(session["socket"])
            except OSError:
                pass
        if self.image_fd is not None:  # its image is no longer used: it may be evicted now
            os.close(self.image_fd)
            self.image_fd = None
        if self.cgroups:  # its processes are gone (or going): so is its group, before its end
            _cgroup().remove(self.cgroups)
        self.update_state(
            state=state,
            reason=reason,
            exit_code=exit_code,
            ended_at=now_iso(),
            cpu_ms=max(
                round((used.ru_utime + used.ru_stime) * 1000),
                watched.cpu_ms if watched is not None else 0,
            ),
        )
        if self.warm_state_path:
            write_state(self.warm_state_path, self.state)

    def cancelled(self) -> bool:
        return os.path.exists(self.marker_path)

    # -- start -------------------------------------------------------------------------

    def run(self) -> None:
        plan = self.plan
        # A cancel may arrive between the backend spawning us and the child starting: look
        # now, and again (in wait) once the child's group is published in state.json.
        if self.cancelled():
            self.finish("cancelled", "cancelled before it started")
            return
        bwrap = plan.get("bwrap")
        if not (bwrap and os.access(bwrap, os.X_OK)):
            # Never fall back to running a task without its sandbox.
            self.finish("failed", BWRAP_MISSING)
            return
        run_as = plan.get("run_as")
        if (run_as and run_as[0] == 0) or (not run_as and os.getuid() == 0):
            self.finish("failed", RUN_AS_ROOT)
            return
        for path, missing in plan.get("devices", ()):
            try:
                is_device = os.stat(path).st_mode & 0o170000 == 0o020000  # S_ISCHR
            except OSError:
                is_device = False
            if not is_device:
                self.finish("failed", missing)
                return
        pin = plan.get("image_pin")
        if pin and not self.pin_image(pin[0], pin[1]):
            self.finish("failed", IMAGE_EVICTED)
            return
        for d in plan.get("mkdirs", ()):
            os.makedirs(d, mode=0o700, exist_ok=True)
            if run_as:
                os.chown(d, run_as[0], run_as[1])
        for path in plan.get("readable", ()):  # script.sh: the job reads it, cannot change it
            if run_as:
                os.chown(path, run_as[0], run_as[1])
            os.chmod(path, 0o500)
        network = plan.get("network")
        jobnet = _jobnet() if network is not None else None
        if (
            network is not None
            and jobnet is not None
            and not os.access(network["slirp4netns"], os.X_OK)
        ):
            # Never fall back to running a batch job on the host's network.
            self.finish("failed", jobnet.SLIRP_MISSING)
            return
        jobwatch = _jobwatch()
        self.log = jobwatch.OutputLog(
            os.path.join(self.jobdir, "output.log"),
            plan.get("output_cap"),
            kept_as=plan.get("output_kept_as"),
        )
        argv = plan["argv"]
        session = plan.get("session")
        if session:
            # A live sandbox: its agent accepts on a socket bound here, by the portal's
            # account, at a path only it may connect to (session/box.py).
            try:
                self.listen_fd = _box().listen(session["socket"]).detach()
            except OSError as exc:
                self.finish("failed", f"the sandbox's socket could not be made: {exc}")
                return
            argv = [str(self.listen_fd) if a == "{listen-fd}" else a for a in argv]
            if session.get("egress") and not self.start_egress(session, run_as):
                return
        if plan.get("api_relay"):  # `sandboxes: true`: their API only (session/apirelay.py)
            try:  # self.egress: stopped as a proxy's is
                self.egress = _beside("apirelay", "../session").start(
                    **plan["api_relay"], run_as=run_as
                )
            except Exception as exc:  # noqa: BLE001 (its EgressError, whichever path imported it)
                self.finish("failed", f"the sandbox API's relay did not start: {exc}")
                return
        if plan.get("cgroup"):  # the kernel's limits, before anything of the job runs
            try:
                self.cgroups = _cgroup().make(plan["cgroup"], os.path.basename(self.jobdir))
            except Exception as exc:  # noqa: BLE001 (its CgroupError, imported by path)
                self.finish("failed", str(exc))
                return
        try:
            pid, sandbox_pid, out_r = self.spawn(argv, plan["env"], plan["cwd"], run_as)
        except InputError as exc:
            self.finish("failed", str(exc), exit_code=127)
            return
        except OSError as exc:
            self.finish("failed", f"could not start the command: {exc}", exit_code=127)
            return
        except Exception as exc:
            if jobnet is None or not isinstance(exc, jobnet.NetworkError):
                raise
            self.finish("failed", f"the job's network could not be set up: {exc}")
            return
        self.sandbox = (sandbox_pid, proc_start_time(sandbox_pid)) if sandbox_pid else None
        self.update_state(
            state="running",
            reason=self.state.get("note") or "",
            started_at=now_iso(),
            child_pid=pid,
            child_pgid=pid,
            child_start=proc_start_time(pid),
            sandbox_pid=sandbox_pid,
            sandbox_start=self.sandbox[1] if self.sandbox else None,
        )
        _jobwait().wait(self, pid, out_r, jobwatch)

    def start_egress(self, session: dict, run_as: list[int] | None) -> bool:
        """A live sandbox's proxy, before its sandbox (which binds the proxy's socket in);
        False once the job has failed for want of it."""
        folder = session["egress_folder"]
        os.makedirs(folder, mode=0o755, exist_ok=True)
        os.chmod(folder, 0o755)  # the proxy reads its configuration as the job's account
        egress = _egress()
        try:
            self.egress = egress.start(
                folder, session["egress"], socket_path=session["egress_socket"], run_as=run_as
            )
        except egress.EgressError as exc:
            os.close(self.listen_fd)
            self.listen_fd = -1
            self.finish("failed", str(exc))
            return False
        return True

    def pin_image(self, lock: str, whole: str) -> bool:
        """Hold the job's image (a shared lock on its use file, docs/containers.md) until this
        supervisor exits, so that no eviction removes it; False if it was removed already."""
        import fcntl  # a task with an image only

        self.image_fd = fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return os.path.exists(whole)

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: str, run_as: list[int] | None
    ) -> tuple[int, int | None, int]:
        """fork + exec `argv` in a new session (pgid == its pid) as `run_as` (uid, gid).

        Like subprocess.Popen(start_new_session=True, close_fds=True, user=, group=,
        extra_groups=[]), without importing it: an exec failure comes back through a
        close-on-exec pipe as the errno. stdout and stderr go to a pipe the supervisor copies
        into output.log (up to the cap). Returns (pid, sandbox init pid, the pipe's end).

        bwrap reports (--info-fd) the host pid of the sandbox's own init (pid 1 of its pid
        namespace); returned as the second value. bwrap's --die-with-parent is racy while
        bwrap is still setting up (a SIGTERM in its first ~20 ms can leave the sandbox running
        without it), so the supervisor also kills that init directly, which takes every
        process of the namespace with it.
        """
        null_fd = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()  # all close-on-exec (PEP 446)
        info_r, info_w = os.pipe()
        # A batch job's sandbox waits, set up, until its network is connected (jobnet.py).
        network = self.plan.get("network")
        block_r, block_w = os.pipe() if network is not None else (-1, -1)
        wait = ["--block-fd", str(block_r)] if network is not None else []
        # The job's environment, for inside the sandbox only (see the module docstring).
        job_env = self.plan.get("job_env")
        args_fd = -1
        if job_env is not None:
            args_fd = os.memfd_create("bwrap-args")  # close-on-exec until the child's exec
            pairs = [arg for k, v in job_env.items() for arg in ("--setenv", k, v)]
            data = b"".join(a.encode() + b"\0" for a in ["--clearenv", *pairs])
            while data:
                data = data[os.write(args_fd, data) :]
            os.lseek(args_fd, 0, 0)
            wait = ["--args", str(args_fd), *wait]
        argv = [argv[0], "--info-fd", str(info_w), *wait, *argv[1:]]
        prepare = self.plan.get("prepare")
        nolinks = _nolinks() if prepare else None
        join = _cgroup().join if self.cgroups else None
        pid = os.fork()
        if pid == 0:  # the child: no Python-level cleanup may run here, only exec or _exit
            try:
                # Its control group joined while still root: the job cannot leave it after.
                failed = join(self.cgroups) if join is not None else ""
                os.setsid()
                os.dup2(null_fd, 0)
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                if run_as:
                    # Groups, then gid, then uid: after setuid nothing could drop the others.
                    # Only its project's group (a storage area's folder), if any.
                    os.setgroups(self.plan.get("groups") or [])
                    os.setgid(run_as[1])
                    os.setuid(run_as[0])
                if os.getuid() == 0 or os.geteuid() == 0:
                    raise PermissionError(1, "refusing to run a job as root")
                # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored
                # across exec: give the job the defaults every program expects (a pipe
                # reader that went away, a file past the size limit: the writer dies).
                for signo in (_signal.SIGPIPE, _signal.SIGXFSZ):
                    _signal.signal(signo, _signal.SIG_DFL)
                os.umask(self.plan.get("umask", 0o077))
                # Its working folder made and its inputs linked, as the job's own account,
                # following no link on the way.
                failed = failed or (nolinks.prepare(prepare) if nolinks is not None else "")
                if failed:
                    os.write(err_w, b"!" + failed.encode())
                    os._exit(127)
                os.chdir(cwd)
                os.set_inheritable(info_w, True)
                for fd in (block_r, args_fd, self.listen_fd):
                    if fd >= 0:
                        os.set_inheritable(fd, True)
                # Every other descriptor is non-inheritable, so exec closes it.
                os.execvpe(argv[0], argv, env)  # PATH is looked up in `env`, not ours
            except OSError as exc:
                os.write(err_w, str(exc.errno or 0).encode())
            finally:
                os._exit(127)
        for fd in (err_w, out_w, null_fd, info_w, block_r, args_fd, self.listen_fd):
            if fd >= 0:
                os.close(fd)
        self.listen_fd = -1
        data = _read_all(err_r)
        if data:  # the child failed before or at exec, and has exited with 127
            for fd in (info_r, out_r, block_w):
                if fd >= 0:
                    os.close(fd)
            os.waitpid(pid, 0)
            if data.startswith(b"!"):
                raise InputError(data[1:].decode("utf-8", "replace"))
            errno = int(data)
            raise OSError(errno, f"{os.strerror(errno)}: {argv[0]!r}")
        sandbox_pid = None
        # {"child-pid": N, ...}; EOF without it: bwrap failed to set up, and exits.
        info = _read_all(info_r).decode("ascii", "replace")
        key = '"child-pid":'
        if key in info:
            sandbox_pid = int(info.split(key, 1)[1].split(",", 1)[0].split("}", 1)[0])
        if network is not None and sandbox_pid is None:
            os.close(block_w)  # bwrap failed: it ends on its own and says why
        elif network is not None:
            try:
                self.net = _jobnet().release(sandbox_pid, block_w, network, run_as)
            except Exception:
                os.close(out_r)
                os.waitpid(pid, 0)  # bwrap, whose sandbox was killed
                raise
        return pid, sandbox_pid, out_r

    # -- supervise ---------------------------------------------------------------------

    def kill_sandbox(self) -> None:
        """SIGKILL the sandbox's init: the kernel then kills everything in its namespace.

        Its programs get no grace period: they would get SIGKILL from --die-with-parent
        anyway once bwrap itself exits on SIGTERM.
        """
        if self.sandbox is None:
            return
        pid, start = self.sandbox
        if start is not None and proc_start_time(pid) == start:
            try:  # noqa: SIM105 (contextlib is an import this file avoids)
                os.kill(pid, 9)  # SIGKILL, without importing signal for it
            except (ProcessLookupError, PermissionError):
                pass


def _beside(name: str, folder: str = ""):
    """A module of the backends imported by path (`-I` leaves them off sys.path): from this
    file's folder, or from `folder` ("..": the backends'; "../session": live sandboxes')."""
    here = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), folder))
    if here not in sys.path:
        sys.path.insert(0, here)
    return __import__(name)


def _cgroup():  # the job's own control group (cgroup.py)
    return _beside("cgroup")


def _jobwatch():  # the watchdog (jobwatch.py)
    return _beside("jobwatch")


def _nolinks():  # the no-link walk (nolinks.py, shared with the Slurm batch script)
    return _beside("nolinks")


def _jobwait():  # the wait loop (jobwait.py), imported once the child runs
    return _beside("jobwait")


def _box():  # a live sandbox's socket and mounts (session/box.py)
    return _beside("box", "../session")


def _egress():  # a live sandbox's proxy (session/egress.py)
    return _beside("egress", "../session")


def _jobnet():  # the job network module (jobnet.py, beside the backends)
    return _beside("jobnet", "..")


class InputError(Exception):
    """An input of the job could not be linked into its working folder (the reason names it)."""


def _read_all(fd: int) -> bytes:
    """Read a pipe to EOF, then close it."""
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    os.close(fd)
    return data


def main(argv: list[str], plan: dict | None = None) -> int:
    """Supervise the job of `argv[1]` (its folder) with `plan`, or the plan in its folder."""
    if len(argv) != 2:
        print("usage: shim.py <jobdir>", file=sys.stderr)
        return 2
    jobdir = os.path.abspath(argv[1])
    shim: Shim | None = None
    try:
        shim = Shim(jobdir, plan)
        shim.run()
    except BaseException as exc:
        import traceback

        # Our stderr is /dev/null: keep the traceback with the job, and do not leave the job
        # looking alive (the backend would otherwise report "the supervisor died").
        try:
            with open(os.path.join(jobdir, "shim.err"), "a", encoding="utf-8") as f:
                traceback.print_exc(file=f)
            if shim is not None:
                shim.finish("failed", f"the local supervisor failed: {exc!r}")
        except Exception:
            pass
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
