"""A live sandbox on Slurm (docs/sandbox-slurm.md): a batch job that holds its allocation and
runs the session's agent, and the relay each exec, put and get takes into it.

The job. Its script runs the watcher (watch.py) with the hooks below: as the job's account,
on the node, before the sandbox starts, the watcher makes the session's folder
(`<session_dir>/switchyard-<key>`, mode 0700, refused if it is there and not the account's),
writes the agent's source into it (passed on the watcher's command line, as the watcher's
own code is: nothing of the portal's tree need be on the node), binds the listening socket
there (session/box.py) and hands it to the sandbox as descriptor 3. The sandbox is the job's
usual one (sandbox.py) with no job folder, no storage and no network, plus the session's home
(a tmpfs) and the agent, read-only (box.mounts); its one command is the agent. The sandbox sees
neither the folder nor the socket; once the sandbox ends the watcher removes them.

With an egress allow-list the watcher also starts the session's proxy before the sandbox, as
the local supervisor does: session/egress.py (its source travels as the agent's does) with its
configuration and socket in the session's folder and its log (the audit) in the job's folder;
the socket and forward.py are bound in (box.mounts) and the agent gets `--egress-socket`
(docs/sandbox-network.md). The portal refuses, at submit, a list whose names lead to its own
services (network.py).

An exec. The portal runs `srun --jobid=<id> --overlap -N1 -n1` as the job's account (the owner
of the job's folder, which the portal made and chowned at submit), a step beside the batch
step on the job's node, running `RELAY` under the node's python3: it reads one request frame
from its stdin, checks the folder is its account's own, connects to the socket and copies the
agent's reply frames to its stdout. `--unbuffered` makes slurmstepd hand each frame on as it is
written (without it a frame waits for a newline), and the bytes pass unchanged (tested). The
portal's end is one side of a socket pair given to srun as its stdin and stdout, so
session/wire.py reads the replies as it reads a local agent's, hostile and bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from scheduling.backends.base import (
    BackendError,
    ExecRequest,
    ExecResult,
    Job,
    SessionGone,
    SubmitRequest,
    WarmSpec,
    WarmView,
)
from scheduling.backends.devices import SHELL_DEVICES, slurm_lines
from scheduling.backends.imagebox import BUSYBOX, busybox_limits
from scheduling.backends.sandbox import TMPFS, sandbox_argv
from scheduling.backends.session import agent, box, egress, forward, network, proxylog, wire
from scheduling.backends.slurm import imagejob, secret_env
from scheduling.backends.slurm.jobfolder import prepare_job_folder
from scheduling.backends.slurm.sessionwatch import EGRESS_SOCKET_NAME, NO_PYTHON, SESSION_WATCHER
from scheduling.backends.slurm.steps import STEP_PATH
from scheduling.backends.slurm.watch import watched

_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")

# What an exec's step runs on the node, as the job's account (`python3 -I -S -c RELAY folder
# wait_s`). Exit 3: no agent listens there (the session has ended); 4: the folder is not the
# account's own; 5: the request was cut short; 6: no socket there yet after `wait_s` (the job
# has started but its watcher has not bound the socket: a loaded node; or it is ending, which
# srun says on the next try). The socket appears only once it listens (box.listen), so a
# refusal is an agent that has gone.
RELAY = r"""
import os, socket, sys, time
folder, wait = sys.argv[1], float(sys.argv[2])
def end(code, message):
    os.write(2, ("switchyard relay: %s\n" % message).encode())
    os._exit(code)
def read(size):
    parts = []
    while size:
        chunk = os.read(0, min(size, 1 << 20))
        if not chunk:
            end(5, "the request was cut short")
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)
head = read(4)
size = int.from_bytes(head, "big")
if size > 100 << 20:
    end(5, "a request of %d bytes" % size)
request = head + read(size)
deadline = time.monotonic() + wait
while True:
    try:
        os.chdir(folder)
        st = os.stat(".")
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            end(4, "the session's folder is not this job's own")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(SOCKET)
        except BaseException:
            sock.close()
            raise
        break
    except FileNotFoundError:
        if time.monotonic() > deadline:
            end(6, "no agent listens yet: the session is starting")
        time.sleep(0.01)
    except ConnectionRefusedError:
        end(3, "no agent listens: the session has ended")
    except PermissionError:
        end(4, "the session's folder is not this job's own")
sock.sendall(request)
while True:
    chunk = sock.recv(1 << 16)
    if not chunk:
        break
    view = memoryview(chunk)
    while view:
        view = view[os.write(1, view):]
""".replace("SOCKET", repr(box.SOCKET_NAME))

GONE_EXIT = 3
NOT_YET_EXIT = 6
# What srun says of a job that has ended or never was (then the session has ended).
_GONE = (
    "has expired",
    "Invalid job id",
    "already completing or completed",
    "Job/step already completing",
    "Job has already finished",
)
_PENDING = "pending execution"
_BACKEND_ID_RE = re.compile(r"^([0-9]{1,18}):([a-z0-9][a-z0-9-]{0,62})$")
# How long a relay waits for the watcher to bind the socket of a job that has just started.
READY_WAIT_S = 10.0
# How much of a session's egress log is read for its audit (its last part).
AUDIT_LIMIT = 4 << 20
# How long a finished exec's srun may take to end before it is killed (it has answered).
_REAP_S = 30.0


def session_folder(session_dir: str, key: str) -> str:
    """The session's node-local folder (its socket and agent file), from its key alone."""
    return f"{session_dir.rstrip('/')}/switchyard-{key}"


def session_argv(
    prefix: list[str], request: SubmitRequest, *, session_dir: str, workdir: Path
) -> tuple[list[str], list[str]]:
    """The watcher's arguments before the sandbox and the sandbox's command (the agent): the
    session's folder, the agent's source and, with egress, the allow-list, where its audit
    log goes (the job's folder: egress_audit), and forward.py's and egress.py's sources."""
    spec = request.spec
    assert spec.session_idle_s is not None
    source = Path(agent.__file__).read_text(encoding="utf-8")
    folder = session_folder(session_dir, request.key)
    before = [folder, source, json.dumps(list(spec.egress)), "", "", ""]
    if spec.egress:
        before[3:] = [
            str(workdir / request.key / egress.LOG_NAME),
            Path(forward.__file__).read_text(encoding="utf-8"),
            Path(egress.__file__).read_text(encoding="utf-8"),
        ]
    return before, [*prefix, *box.agent_argv(spec.session_idle_s, egress=bool(spec.egress))]


def session_mounts(request: SubmitRequest, *, session_dir: str) -> list[str]:
    """bubblewrap's arguments for the session's home (memory-sized), its agent and, with
    egress, the forwarder and the proxy's socket (box.mounts, as on the local backend)."""
    folder = session_folder(session_dir, request.key)
    home = request.spec.resources.memory_mib << 20
    if not request.spec.egress:
        return box.mounts(f"{folder}/agent.py", home_bytes=home)
    return box.mounts(
        f"{folder}/agent.py",
        home_bytes=home,
        forward_file=f"{folder}/forward.py",
        egress_socket=f"{folder}/{EGRESS_SOCKET_NAME}",
    )


def refuse_unsupported(request: SubmitRequest) -> None:
    """What a live sandbox on Slurm does not do (several nodes), refused by name at submit; an allow-list
    that is not one, or whose names lead to the portal's own services (network.py)."""
    if request.spec.egress:
        refusal = network.egress_refusal(request.spec.egress)
        if refusal is not None:
            raise BackendError(refusal)
    nodes = request.spec.resources.nodes
    if nodes and nodes > 1:
        raise BackendError(f"nodes: a live sandbox runs on one node; expected 1, got {nodes}")


class SlurmSessions:
    """The Backend protocol's session calls over srun (a mixin of SlurmBackend)."""

    sessions = True
    workdir: Path
    session_dir: str
    slurm_conf: str | None
    max_processes: int
    max_file_bytes: int
    run: Callable[..., str]  # the CommandRunner of the backend
    usage_path: Callable[[str], Path]
    _unix_user: Callable[[SubmitRequest], str]

    def session_script(self, request: SubmitRequest) -> str:
        """A live sandbox's batch script: the watcher with the session's hooks, the agent in
        the job's usual sandbox without its job folder, storage or network."""
        refuse_unsupported(request)
        spec = request.spec
        conf = os.path.dirname(self.slurm_conf or "/etc/slurm/slurm.conf")
        devices = slurm_lines(request.devices, spec.resources.gpus, os.path.join(conf, "gres.conf"))
        lines = [
            "#!/bin/bash",
            ":",  # a command first: Slurm reads no #SBATCH line after it (backend.py)
            *devices,
            f"export SWITCHYARD_TASK_KEY={shlex.quote(request.key)}",
        ]
        for name, value in spec.env:
            if not _ENV_NAME_RE.match(name):
                raise BackendError(f"environment name {name!r} is not allowed")
            lines.append(f"export {name}={shlex.quote(value)}")
        account = self._unix_user(request)
        lines += secret_env.prepare(self.workdir / request.key, spec.secret_env, account)
        lines += [
            f"export HOME={box.HOME} TMPDIR=/tmp",
            f'export PATH="${{PATH:-{STEP_PATH}}}"',
            "command -v bwrap >/dev/null || { echo 'bubblewrap (bwrap) is not installed on "
            "this node: tasks never run unsandboxed' >&2; exit 127; }",
        ]
        image = spec.image_digest is not None
        if image:
            # Over the image's root file system, as a batch job in an image (imagejob.py):
            # the node's Prolog pulls it (and refuses an image without python3, naming it);
            # its Env, PATH included, is set inside, so `python3` is the image's own.
            lines += imagejob.script_lines(self.workdir, request.key)
        prefix = sandbox_argv(
            "bwrap",
            writable=[],
            hide=str(self.workdir),
            chdir=imagejob.SHELL_CHDIR if image else box.HOME,
            tmp_bytes=spec.resources.memory_mib << 20,
            max_processes=self.max_processes,
            max_file_bytes=self.max_file_bytes,
            devices=[SHELL_DEVICES] if devices else [],
            extra=session_mounts(request, session_dir=self.session_dir),
            system=[imagejob.SHELL_SYSTEM] if image else None,
            runner=busybox_limits(self.max_processes, self.max_file_bytes) if image else None,
        )
        before, command = session_argv(
            prefix, request, session_dir=self.session_dir, workdir=self.workdir
        )
        lines += watched(
            command,
            str(self.usage_path(request.key)),
            None,  # no network of its own: egress goes through the session's proxy
            program=SESSION_WATCHER,
            args=before,
            without_python=NO_PYTHON,
        )
        entry = pwd.getpwnam(account)
        prepare_job_folder(self.workdir, request, entry, self.usage_path)
        if image:
            # What the sandbox mounts over the image: its home and the agent's folder too.
            needed = ["/dev", "/proc", *TMPFS, BUSYBOX, str(self.workdir), box.HOME]
            imagejob.write_image_file(
                self.workdir,
                request,
                entry.pw_uid,
                needed=[*needed, os.path.dirname(box.AGENT)],
                work=str(self.workdir / request.key),
                chdir=box.HOME,
                script=None,
            )
        return "\n".join(lines) + "\n"

    def claim_warm(self, request: SubmitRequest) -> Job | None:
        """None: Slurm keeps no warm pool. A warm session would be a running job holding its
        node's cores and memory that no project pays for, beside the queue's own jobs."""
        return None

    def keep_warm(self, specs: list[WarmSpec]) -> list[WarmView]:
        return []

    def exec_in(
        self,
        backend_id: str,
        request: ExecRequest,
        *,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> ExecResult:
        return wire.exec_in(backend_id, request, on_output=on_output, via=self._relay)

    def put_file(self, backend_id: str, path: str, data: bytes, *, mode: int = 0o644) -> None:
        wire.put_file(backend_id, path, data, mode=mode, via=self._relay)

    def get_file(self, backend_id: str, path: str, *, limit: int) -> bytes:
        return wire.get_file(backend_id, path, limit=limit, via=self._relay)

    def session_ping(self, backend_id: str, *, timeout_s: float = 15.0) -> int:
        """The agent's process id once it answers (its session is ready)."""
        return wire.ping(backend_id, timeout_s=timeout_s, via=self._relay)

    @contextlib.contextmanager
    def _relay(self, backend_id: str, deadline: float) -> Iterator[socket.socket]:
        """A socket to the session's agent: srun's stdin and stdout, the relay behind them."""
        match = _BACKEND_ID_RE.match(backend_id)
        if match is None:
            raise SessionGone(f"{backend_id!r} is not a Slurm session's id")
        job_id, key = match.groups()
        uid, gid = self._session_account(key)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        wait = max(0.1, min(READY_WAIT_S, deadline - time.monotonic() - 1.0))
        argv = [
            os.path.join(getattr(self.run, "bin_dir", None) or "", "srun"),
            f"--jobid={job_id}",
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            "--quiet",
            "--unbuffered",
            "--chdir=/",
            "--job-name=switchyard-relay",
            "python3",
            "-I",
            "-S",
            "-c",
            RELAY,
            session_folder(self.session_dir, key),
            f"{wait:.3f}",
        ]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        try:
            proc = subprocess.Popen(
                argv,
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
                user=uid,
                group=gid,
                extra_groups=[],
                start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            raise BackendError(f"srun could not be started: {exc}") from None
        finally:
            theirs.close()
        kill_after = _REAP_S
        try:
            yield ours
        except BackendError as exc:
            ours.close()
            kill_after = 0.0  # it has failed or run past its deadline: its step goes now
            raise _why(proc, exc, backend_id) from None
        finally:
            ours.close()
            if proc.returncode is None:
                threading.Thread(target=_reap, args=(proc, kill_after), daemon=True).start()

    def egress_audit(self, backend_id: str, *, limit_bytes: int = AUDIT_LIMIT) -> list[dict]:
        """The session's egress audit (proxylog.py's records): its proxy's log, which the
        watcher keeps in the job's folder (shared with the node, outliving the session's
        node-local folder), read here during the session and after it, at most its last
        `limit_bytes`. The file is the job's account's: it says what the proxy logged unless
        that account wrote it itself, as the watcher's CPU figure (docs/sandbox-slurm.md)."""
        match = _BACKEND_ID_RE.match(backend_id)
        if match is None:
            raise SessionGone(f"{backend_id!r} is not a Slurm session's id")
        key = match.group(2)
        try:
            owner = os.stat(self.workdir / key).st_uid  # the job's account (_session_account)
        except FileNotFoundError:
            return []
        path = self.workdir / key / egress.LOG_NAME
        return proxylog.read_tail(str(path), limit=limit_bytes, owner=owner)

    def _session_account(self, key: str) -> tuple[int, int]:
        """The account the session's job runs as: its folder's owner (made by the portal at
        submit, chowned to the job's account; no account may give a folder away)."""
        try:
            st = os.stat(self.workdir / key)
        except FileNotFoundError:
            raise SessionGone(f"no session {key} here") from None
        if st.st_uid == 0 or st.st_gid == 0:
            raise BackendError(f"refusing to reach session {key} as root")
        return st.st_uid, st.st_gid


def _why(proc: subprocess.Popen, exc: BackendError, backend_id: str) -> BackendError:
    """What failed, once srun has said it: the session ended, it has not started yet, or
    srun's own message; else the wire's error."""
    try:
        _, err = proc.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        return exc  # still running: the agent has not answered in time
    text = (err or b"").decode("utf-8", "replace").strip()
    if proc.returncode == GONE_EXIT or any(m in text for m in _GONE):
        return SessionGone(f"the session {backend_id} has ended")
    if proc.returncode == NOT_YET_EXIT:
        return BackendError(f"the session {backend_id} is starting: its agent is not listening yet")
    if _PENDING in text:
        return BackendError(f"the session {backend_id} is starting: its job waits for its node")
    if proc.returncode:
        last = text.splitlines()[-1] if text else f"exit code {proc.returncode}"
        return BackendError(f"the session {backend_id} could not be reached: {last}")
    return exc


def _reap(proc: subprocess.Popen, kill_after: float) -> None:
    """Wait for an exec's srun (its step's end) off the caller's path; kill a stuck one."""
    try:
        proc.communicate(timeout=kill_after)
        return
    except subprocess.TimeoutExpired:
        proc.terminate()  # srun ends its step: the relay goes, the agent's command keeps its own
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
