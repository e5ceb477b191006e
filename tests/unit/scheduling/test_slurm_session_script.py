"""A live sandbox's batch script on Slurm (scheduling/backends/slurm/session.py), run with the
real bash, bubblewrap and python3 as the job's account, as slurmd would run it: no cluster
needed. Its watcher binds the session's socket in its node-local folder, the agent answers
there, the relay an exec step runs reaches it, and the end of the script leaves nothing.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import stat
import struct
import subprocess
import time

import pytest

from scheduling.backends import SubmitRequest
from scheduling.backends.base import BackendError, ExecRequest, SessionGone
from scheduling.backends.session import box, egress, wire
from scheduling.backends.slurm import SlurmBackend, imagejob
from scheduling.backends.slurm.session import (
    GONE_EXIT,
    NOT_YET_EXIT,
    RELAY,
    _why,
    session_folder,
)
from scheduling.decisions.types import QueuePolicy
from scheduling.spec import Resources, TaskSpec

JOB_ACCOUNT = "switchyard-job"
AGENTS = QueuePolicy(name="inference-agent", pool="inference-agent", task_types=("sandbox",))
AS_JOB = ["setpriv", f"--reuid={JOB_ACCOUNT}", f"--regid={JOB_ACCOUNT}", "--clear-groups"]


@pytest.fixture
def backend(job_root) -> SlurmBackend:
    sessions = job_root / "node-tmp"
    sessions.mkdir()
    sessions.chmod(0o1777)  # as a node's /tmp
    return SlurmBackend(
        "slurm",
        cluster="test",
        workdir=str(job_root / "jobs"),
        service_account=JOB_ACCOUNT,
        session_dir=str(sessions),
    )


def session_request(key: str = "sy-7-1", **spec: object) -> SubmitRequest:
    fields: dict = {
        "name": "s",
        "project": "materials",
        "command": ("touch", "/tmp/never"),
        "resources": Resources(cpus=1, memory_mib=64),
        "session_idle_s": 120,
        **spec,
    }
    return SubmitRequest(
        key=key,
        spec=TaskSpec(**fields),
        type="sandbox",
        queue=AGENTS,
        project="materials",
        user="a",
    )


def relay(folder: str, frame: bytes, wait_s: float = 0.2) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AS_JOB, "python3", "-I", "-S", "-c", RELAY, folder, str(wait_s)],
        input=frame,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    )


def ping_frame() -> bytes:
    body = b'{"op":"ping"}'
    return struct.pack(">I", len(body)) + body


def test_the_script_runs_the_agent_behind_a_socket_only_its_account_reaches(backend):
    argv, script = backend.sbatch_command(session_request())
    assert "--export=NONE" in argv
    folder = session_folder(backend.session_dir, "sy-7-1")
    sock = f"{folder}/{box.SOCKET_NAME}"
    job = subprocess.Popen(
        [*AS_JOB, "bash", "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            assert job.poll() is None, job.stdout.read() if job.stdout else ""
            assert time.monotonic() < deadline, "the watcher bound no socket"
            time.sleep(0.02)
        account = pwd.getpwnam(JOB_ACCOUNT).pw_uid
        info = os.stat(folder)
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (account, 0o700)
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600

        # The relay, as an exec step runs it: one frame in, the agent's frames out.
        done = relay(folder, ping_frame())
        assert done.returncode == 0, done.stderr
        size = struct.unpack(">I", done.stdout[:4])[0]
        assert size == len(done.stdout) - 4 and b'"ok":true' in done.stdout

        # The session's command is the agent, never the spec's; it runs in the sandbox.
        result = wire.exec_in(sock, ExecRequest(argv=("sh", "-c", "pwd; ls /tmp; id -u")))
        assert result.stdout.decode().split() == ["/home/sandbox", str(account)]
        # Neither its socket's folder nor any job folder (its own included) is in it.
        look = ("sh", "-c", f"ls -A {backend.workdir}; test -e {folder} || echo none")
        assert wire.exec_in(sock, ExecRequest(argv=look)).stdout == b"none\n"
    finally:
        os.killpg(job.pid, signal.SIGTERM)  # what scancel sends first
        job.wait(timeout=20)
    # The watcher removed the folder. A relay finding none cannot tell a job that is ending
    # from one whose watcher has not bound its socket yet (a loaded node): it says "not yet",
    # and srun's next step says which (the job has ended: SessionGone).
    assert not os.path.exists(folder)
    early = relay(folder, ping_frame())
    assert early.returncode == NOT_YET_EXIT and b"no agent listens yet" in early.stderr
    assert isinstance(_why(finished(early), BackendError("x"), "7:sy-7-1"), BackendError)
    assert not isinstance(_why(finished(early), BackendError("x"), "7:sy-7-1"), SessionGone)


def test_a_socket_that_refuses_is_an_agent_that_has_gone(backend):
    """The socket appears only once it listens (box.listen), so a refusal is never a session
    that is starting: it has ended, and the caller is told so."""
    folder = session_folder(backend.session_dir, "sy-9-1")
    account = pwd.getpwnam(JOB_ACCOUNT)
    os.mkdir(folder, 0o700)
    os.chown(folder, account.pw_uid, account.pw_gid)
    stale = box.listen(f"{folder}/{box.SOCKET_NAME}")
    os.chown(f"{folder}/{box.SOCKET_NAME}", account.pw_uid, account.pw_gid)
    stale.close()  # the agent went; its socket file stayed
    done = relay(folder, ping_frame())
    assert done.returncode == GONE_EXIT and b"no agent listens" in done.stderr
    assert isinstance(_why(finished(done), BackendError("x"), "9:sy-9-1"), SessionGone)


def finished(done: subprocess.CompletedProcess) -> subprocess.Popen:
    """An ended process that said what `done` said, for _why (which reads srun's stderr)."""
    return subprocess.Popen(
        [
            "sh",
            "-c",
            'printf %s "$1" >&2; exit "$2"',
            "sh",
            done.stderr.decode(),
            str(done.returncode),
        ],
        stderr=subprocess.PIPE,
    )


def test_a_relay_refuses_a_folder_that_is_not_its_accounts_own(backend):
    folder = session_folder(backend.session_dir, "sy-8-1")
    os.mkdir(folder)  # someone else's (root's) folder under the session's name
    for mode in (0o755, 0o700):  # one it may enter, one it may not
        os.chmod(folder, mode)
        done = relay(folder, ping_frame())
        assert done.returncode == 4 and b"not this job's own" in done.stderr


def test_sessions_with_a_bad_allow_list_or_several_nodes_are_refused_by_name(backend):
    with pytest.raises(BackendError, match="^egress: expected entries of the form host:port"):
        backend.sbatch_command(session_request(egress=("127.0.0.1:8080",)))
    with pytest.raises(BackendError, match="^nodes: .*expected 1, got 2"):
        backend.sbatch_command(session_request(resources=Resources(cpus=2, nodes=2)))


def test_slurm_keeps_no_warm_pool(backend):
    assert backend.sessions is True
    assert backend.claim_warm(session_request()) is None
    assert backend.keep_warm([]) == []


def test_a_session_with_egress_binds_its_proxys_socket_in_and_keeps_its_audit_in_the_job_folder(
    backend,
):
    _, script = backend.sbatch_command(session_request(egress=("pypi.org:443",)))
    folder = session_folder(backend.session_dir, "sy-7-1")
    assert f"--ro-bind {folder}/egress.sock {box.EGRESS_SOCKET}" in script
    assert f"--ro-bind {folder}/forward.py {box.FORWARD}" in script
    assert f"--egress-socket {box.EGRESS_SOCKET}" in script
    log = backend.workdir / "sy-7-1" / egress.LOG_NAME
    assert f" '[\"pypi.org:443\"]' {log} " in script
    # The portal reads the log's last part only, the job account's own file, never a link.
    line = "INFO      Dec 05 10:20:16.475 [7]: Request (file descriptor 9): GET http://a.org/ x"
    log.write_text("x" * 5000 + "\n" + line + "\n")
    account = pwd.getpwnam(JOB_ACCOUNT)
    os.chown(log, account.pw_uid, account.pw_gid)  # the watcher writes it as the job's account
    records = backend.egress_audit("12:sy-7-1", limit_bytes=len(line) + 10)
    assert [(r["target"], r["decision"]) for r in records] == [("a.org:80", "refused")]
    os.chown(log, 0, 0)
    assert backend.egress_audit("12:sy-7-1") == []  # root's file, not the job account's
    log.unlink()
    log.symlink_to("/etc/passwd")
    assert backend.egress_audit("12:sy-7-1") == []


def test_a_session_in_an_image_has_the_nodes_prolog_pull_it_and_check_its_python(backend):
    request = session_request(image="r.example/python:3", image_digest="sha256:" + "0" * 64)
    _, script = backend.sbatch_command(request)
    assert "switchyard_system" in script and imagejob.SHELL_SYSTEM in script
    data = json.loads(imagejob.image_path(backend.workdir, "sy-7-1").read_text())
    assert data["session"] is True and data["chdir"] == box.HOME
    assert {box.HOME, os.path.dirname(box.AGENT)} <= set(data["needed"])
