"""Slurm, driven through its own commands with JSON output (sbatch, squeue, sacct, scontrol…).

Mapping (DESIGN.md "Backends"): queue ↔ partition, project ↔ account, whole-node ↔
`--exclusive`, gpus ↔ `--gres=gpu:N` per node (or `--gpus=N` when no node count is given),
walltime ↔ `--time`, estimate ↔ `--time-min`, the attempt key ↔ `--job-name`, so `find(key)`
finds a job a crashed dispatcher already made and `--dependency=singleton` stops a duplicate
from ever running beside it.

Nothing from a descriptor reaches a shell or an `#SBATCH` line unquoted (invariant 5):
options go on sbatch's argv (never through a shell); the script's first line after the
shebang is a command, so Slurm reads no `#SBATCH` directive from the body; the command is
`exec`'d with every argument `shlex.quote`d; environment values are exported quoted, with
names validated against an allowlist pattern; `--export=NONE` keeps the portal's own
environment out of the job.

A job is identified by (job id, job name = attempt key): the backend id is `<jobid>:<key>`
and a job whose name is not the key is not ours, so a job id reused after the controller lost
its state is never mistaken for the old job.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scheduling.backends.base import (
    BackendError,
    BackendUnavailable,
    Job,
    JobState,
    SubmitRequest,
)
from scheduling.backends.local import sandbox_argv
from scheduling.decisions.types import NodeView
from scheduling.spec import SANDBOXED_TYPES

log = logging.getLogger(__name__)

_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ACCOUNT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

# Slurm's job states → ours. COMPLETING still has processes on the nodes.
STATE_MAP: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "RESIZING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "PREEMPTED": JobState.FAILED,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "NODE_FAIL": JobState.NODE_FAIL,
    "BOOT_FAIL": JobState.NODE_FAIL,
}

# Why a job ended, when Slurm's state says more than an exit code would.
END_REASONS = {
    "OUT_OF_MEMORY": "killed by Slurm: out of memory",
    "PREEMPTED": "preempted by a higher-priority job",
    "TIMEOUT": "killed by Slurm: walltime exceeded",
    "DEADLINE": "killed by Slurm: deadline reached",
    "NODE_FAIL": "a node of the job failed",
    "BOOT_FAIL": "a node of the job failed to boot",
    "REVOKED": "revoked by a sibling cluster",
}

# Slurm's pending reasons, in a researcher's words.
PENDING_REASONS = {
    "None": "submitted to Slurm; waiting for the scheduler's next pass",
    "Priority": "waiting behind higher-priority jobs in the partition",
    "Resources": "waiting for free nodes: the resources it asks for are in use",
    "Dependency": "waiting for another job of the same task to end (duplicate guard)",
    "DependencyNeverSatisfied": "a job it depends on failed; it will never start",
    "BeginTime": "waiting for its start time",
    "JobHeldUser": "held by its owner",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "NodeDown": "a node it needs is down",
    "PartitionDown": "the partition (queue) is down",
    "PartitionInactive": "the partition (queue) is inactive",
    "PartitionNodeLimit": "asks more nodes than the partition allows",
    "PartitionTimeLimit": "asks a longer walltime than the partition allows",
    "AssocGrpGRES": "the project's GPU quota is in use",
    "AssocGrpCpuLimit": "the project's CPU quota is in use",
    "AssocMaxJobsLimit": "the project already runs its maximum number of jobs",
    "QOSMaxJobsPerUserLimit": "you already run the maximum number of jobs for this QOS",
    "QOSGrpGRES": "the QOS's GPU limit is in use",
    "Reservation": "waiting for its reservation",
    "Licenses": "waiting for licences",
    "InvalidAccount": "the project has no Slurm account",
    "InvalidQOS": "the QOS is not valid for this project",
}

_ALREADY_GONE = (
    "already completing or completed",
    "Invalid job id specified",
    "Job/step already completing",
)

_UNREACHABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Slurm controller not responding",
    "Socket timed out",
    "Connection refused",
    "Unable to establish connection",
    "slurm_persist_conn_open",
    "Zero Bytes were transmitted or received",
    "Slurmctld is not responding",
)


@dataclass
class CommandRunner:
    """Runs a Slurm command as an argv list (never through a shell) against one config."""

    slurm_conf: str | None = None
    timeout_s: float = 20.0
    bin_dir: str | None = None
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str], *, stdin: str | None = None) -> str:
        argv = list(argv)
        if self.bin_dir:
            argv[0] = os.path.join(self.bin_dir, argv[0])
        # Epoch seconds in sacct's text output, whatever the host's time zone.
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "SLURM_TIME_FORMAT": "%s"}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        self.calls.append(tuple(argv))
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BackendUnavailable(f"{argv[0]} timed out after {self.timeout_s:g}s") from exc
        except FileNotFoundError as exc:
            raise BackendUnavailable(f"{argv[0]} is not installed") from exc
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip()
            if any(marker in message for marker in _UNREACHABLE_MARKERS):
                raise BackendUnavailable(message.splitlines()[-1] if message else "unreachable")
            raise BackendError(f"{Path(argv[0]).name} failed: {message or done.returncode}")
        return done.stdout

    def count(self, command: str) -> int:
        return sum(1 for argv in self.calls if Path(argv[0]).name == command)


class SlurmBackend:
    """The Backend protocol over Slurm's commands."""

    def __init__(
        self,
        alias: str,
        *,
        cluster: str,
        workdir: str,
        slurm_conf: str | None = None,
        bin_dir: str | None = None,
        command_timeout_s: float = 20.0,
        qos: str | None = None,
        service_account: str | None = None,
        sacct_window_days: int = 7,
        runner: CommandRunner | None = None,
    ) -> None:
        self.alias = alias
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.qos = qos
        self.service_account = service_account
        self.sacct_window_days = sacct_window_days
        self.run = runner or CommandRunner(
            slurm_conf=slurm_conf, timeout_s=command_timeout_s, bin_dir=bin_dir
        )
        self._known_associations: set[tuple[str, str]] = set()

    # -- submit ---------------------------------------------------------------------------

    def submit(self, request: SubmitRequest) -> Job:
        if not _KEY_RE.match(request.key):
            raise BackendError(f"job key {request.key!r} is not in the safe alphabet")
        argv, script = self.sbatch_command(request)
        try:
            out = self.run(argv, stdin=script)
        except BackendUnavailable:
            raise  # the engine retries, and its find() resolves whether sbatch made the job
        except BackendError as exc:
            if "Invalid account" not in str(exc):
                raise
            self.ensure_association(request.project, self._unix_user(request))
            out = self.run(argv, stdin=script)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise BackendError(f"sbatch answered {out.strip()!r}, not a job id")
        return Job(
            backend_id=f"{job_id}:{request.key}",
            state=JobState.PENDING,
            reason=PENDING_REASONS["None"],
        )

    def sbatch_command(self, request: SubmitRequest) -> tuple[list[str], str]:
        """The sbatch argv and the script it reads on stdin."""
        spec = request.spec
        res = spec.resources
        account = _account(request.project)
        out_dir = self.workdir / request.key
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={request.key}",
            f"--comment=switchyard {request.key}",
            f"--partition={request.queue.name}",
            f"--account={account}",
            "--export=NONE",
            "--dependency=singleton",
            f"--chdir={out_dir}",
            f"--output={out_dir}/output.log",
            f"--mem={res.memory_mib}M",
        ]
        if self.qos:
            argv.append(f"--qos={self.qos}")
        if res.nodes:
            argv += [
                f"--nodes={res.nodes}",
                f"--ntasks={res.cpus}",
                f"--ntasks-per-node={res.cpus // res.nodes}",
            ]
            if res.gpus:
                argv.append(f"--gres=gpu:{res.gpus // res.nodes}")
        elif request.type == "hpc-simulation":
            argv.append(f"--ntasks={res.cpus}")  # MPI ranks, spread where they fit
            if res.gpus:
                argv.append(f"--gpus={res.gpus}")
        else:
            argv += ["--nodes=1", "--ntasks=1", f"--cpus-per-task={res.cpus}"]
            if res.gpus:
                argv.append(f"--gres=gpu:{res.gpus}")
        if spec.walltime_s:
            argv.append(f"--time={_minutes(spec.walltime_s)}")
        # The estimate is not passed as --time-min: Slurm 22.05's backfill may lower a job's
        # time limit to its --time-min, killing it at its estimate (docs/slurm.md).
        if request.queue.allocation == "whole-node":
            argv.append("--exclusive")
        unix_user = self._unix_user(request)
        if unix_user:
            argv.append(f"--uid={unix_user}")
        return argv, self.batch_script(request)

    def batch_script(self, request: SubmitRequest) -> str:
        spec = request.spec
        lines = [
            "#!/bin/bash",
            # A command before anything from the descriptor: Slurm reads #SBATCH directives
            # only until the first command, so none can hide in a user's script.
            ":",
            f"export SWITCHYARD_TASK_KEY={shlex.quote(request.key)}",
            # With --export=NONE an srun inside the job would get an empty environment.
            "export SLURM_EXPORT_ENV=ALL",
        ]
        for name, value in spec.env:
            if not _ENV_NAME_RE.match(name):
                raise BackendError(f"environment name {name!r} is not allowed")
            lines.append(f"export {name}={shlex.quote(value)}")
        workdir = self.workdir / request.key
        if spec.command is not None:
            argv = list(spec.command)
        elif spec.script is not None:
            argv = ["/bin/bash", str(workdir / "script.sh")]
        else:
            raise BackendError("the task has neither a command nor a script")
        if request.type in SANDBOXED_TYPES:
            lines.append(
                "command -v bwrap >/dev/null || { echo 'bubblewrap (bwrap) is not installed on "
                "this node: agent/sandbox tasks never run unsandboxed' >&2; exit 127; }"
            )
            prefix = sandbox_argv(
                "bwrap",
                writable=[str(workdir)],
                readonly=[argv[1]] if spec.command is None else [],
                hide=str(self.workdir),
                chdir=str(workdir),
            )
            argv = [*prefix, *argv]
        lines.append("exec " + " ".join(shlex.quote(arg) for arg in argv))
        self._prepare_workdir(request)
        return "\n".join(lines) + "\n"

    def _prepare_workdir(self, request: SubmitRequest) -> None:
        path = self.workdir / request.key
        path.mkdir(parents=True, exist_ok=True, mode=0o750)
        if request.spec.script is not None:
            script = path / "script.sh"
            fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(request.spec.script)
        unix_user = self._unix_user(request)
        if unix_user:
            import pwd

            try:
                entry = pwd.getpwnam(unix_user)
            except KeyError as exc:
                raise BackendError(f"no Unix account {unix_user!r} on this host") from exc
            for item in (path, *path.iterdir()):
                os.chown(item, entry.pw_uid, entry.pw_gid)

    def _unix_user(self, request: SubmitRequest) -> str | None:
        """The researcher's cluster account if they have one, else the service account."""
        return request.extra.get("run_as") or self.service_account

    # -- accounts ----------------------------------------------------------------------------

    def ensure_association(self, project: str, unix_user: str | None) -> None:
        """Make the project's Slurm account (and the user's association with it) exist."""
        account = _account(project)
        user = unix_user or _current_user()
        if (account, user) in self._known_associations:
            return
        for argv in (
            [
                "sacctmgr",
                "-i",
                "add",
                "account",
                account,
                f"cluster={self.cluster}",
                f"description=switchyard project {account}",
            ],
            [
                "sacctmgr",
                "-i",
                "add",
                "user",
                user,
                f"account={account}",
                f"cluster={self.cluster}",
            ],
        ):
            try:
                self.run(argv)
            except BackendError as exc:
                # sacctmgr exits non-zero when there is "nothing new" to add.
                if "Nothing new added" not in str(exc) and "already exists" not in str(exc):
                    raise
        self._known_associations.add((account, user))

    # -- follow ------------------------------------------------------------------------------

    def find(self, key: str) -> Job | None:
        """The job an earlier submit made under `key`, live or finished, or None."""
        for job in self._squeue(names=[key]):
            if job.key == key:
                return job.as_job()
        for job in self._sacct(names=[key]):
            if job.key == key:
                return job.as_job()
        return None

    def poll(self, backend_ids: list[str]) -> dict[str, Job]:
        """One squeue and at most one sacct for every tracked job."""
        wanted = {}
        for backend_id in backend_ids:
            job_id, _, key = backend_id.partition(":")
            wanted[job_id] = (backend_id, key)
        if not wanted:
            return {}
        result: dict[str, Job] = {}
        ended: dict[str, Job] = {}  # squeue's view of finished jobs, if sacct lags behind
        for job in self._squeue(job_ids=list(wanted)):
            backend_id, key = wanted.get(job.job_id, (None, None))
            if backend_id is None or job.key != key:
                continue  # a reused job id: not our job
            current = job.as_job()
            (ended if current.state.finished else result)[backend_id] = current
        missing = [job_id for job_id, (bid, _) in wanted.items() if bid not in result]
        if missing:
            # Finished jobs: sacct has the exit code and the accounting Slurm keeps.
            for job in self._sacct(job_ids=missing):
                backend_id, key = wanted.get(job.job_id, (None, None))
                if backend_id and job.key == key:
                    result[backend_id] = job.as_job()
        for backend_id, _ in wanted.values():
            if backend_id not in result:
                result[backend_id] = ended.get(backend_id) or Job(
                    backend_id=backend_id,
                    state=JobState.UNKNOWN,
                    reason="Slurm no longer knows the job",
                )
        return result

    def _squeue(self, *, job_ids: Sequence[str] = (), names: Sequence[str] = ()) -> list[_SlurmJob]:
        argv = ["squeue", "--json", "--all"]
        if job_ids:
            argv.append("--jobs=" + ",".join(job_ids))
        if names:
            argv.append("--name=" + ",".join(names))
        try:
            data = _json(self.run(argv))
        except BackendError as exc:
            # squeue --jobs with ids it no longer knows exits 1 with "Invalid job id".
            if "Invalid job id" in str(exc):
                return []
            raise
        return [_SlurmJob.from_squeue(j) for j in data.get("jobs", [])]

    def _sacct(self, *, job_ids: Sequence[str] = (), names: Sequence[str] = ()) -> list[_SlurmJob]:
        # Parsable text, not --json: Slurm 22.05's `sacct --json` reports exit code 0 for a
        # job that exited 3 (docs/slurm.md). JobName goes last so a '|' in someone else's
        # job name cannot shift the columns.
        argv = [
            "sacct", "-X", "-P", "-n", f"--starttime=now-{self.sacct_window_days}days",
            "--format=JobIDRaw,State,ExitCode,Submit,Start,End,NodeList,Reason,JobName",
        ]  # fmt: skip
        if job_ids:
            argv.append("--jobs=" + ",".join(job_ids))
        if names:
            argv.append("--name=" + ",".join(names))
        jobs = []
        for line in self.run(argv).splitlines():
            fields = line.split("|", 8)
            if len(fields) == 9 and fields[0].isdigit():
                jobs.append(_SlurmJob.from_sacct_row(fields))
        # sacct lists every run of a requeued job; the latest is the one that counts.
        jobs.sort(key=lambda j: j.submit_time or 0)
        return list({job.job_id: job for job in jobs}.values())

    # -- control -----------------------------------------------------------------------------

    def cancel(self, backend_id: str) -> None:
        job_id, _, key = backend_id.partition(":")
        # --name makes scancel refuse a reused job id that is not our job.
        argv = ["scancel", job_id]
        if key:
            argv.append(f"--name={key}")
        try:
            self.run(argv)
        except BackendError as exc:
            # Cancelling a job that has already ended (or that Slurm has forgotten) is a no-op.
            if not any(m in str(exc) for m in _ALREADY_GONE):
                raise

    def set_priority(self, backend_id: str, value: int) -> None:
        job_id = backend_id.partition(":")[0]
        self.run(["scontrol", "update", f"JobId={job_id}", f"Priority={int(value)}"])

    def drain(self, node: str, reason: str) -> None:
        self.run(
            [
                "scontrol",
                "update",
                f"NodeName={node}",
                "State=DRAIN",
                f"Reason={reason[:200] or 'drained by switchyard'}",
            ]
        )

    def resume(self, node: str) -> None:
        self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def nodes(self) -> list[NodeView]:
        data = _json(self.run(["sinfo", "--json"]))
        views = []
        for node in data.get("nodes", []):
            state = str(_scalar(node.get("state")) or "").upper()
            gpus = _gres_gpus(node.get("gres", ""))
            views.append(
                NodeView(
                    name=node.get("name") or node.get("hostname"),
                    cpus=int(_scalar(node.get("cpus")) or 0),
                    memory_mib=int(_scalar(node.get("real_memory")) or 0),
                    gpus=gpus,
                    free_cpus=int(_scalar(node.get("idle_cpus")) or 0)
                    if "idle_cpus" in node
                    else None,
                    available=not any(s in state for s in ("DRAIN", "DOWN", "FAIL", "INVAL")),
                )
            )
        return views

    def log(self, backend_id: str, *, offset: int = 0, limit: int = 1 << 20) -> str:
        key = backend_id.partition(":")[2]
        path = self.workdir / key / "output.log"
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read(limit).decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""


@dataclass(frozen=True, slots=True)
class _SlurmJob:
    job_id: str
    key: str
    state_name: str
    reason: str
    exit_code: int | None
    nodes: tuple[str, ...]
    submit_time: int | None
    start_time: int | None
    end_time: int | None

    @classmethod
    def from_squeue(cls, j: Mapping[str, Any]) -> _SlurmJob:
        return cls(
            job_id=str(_scalar(j.get("job_id"))),
            key=str(j.get("name") or ""),
            state_name=_state_name(j.get("job_state")),
            reason=str(_scalar(j.get("state_reason")) or "None"),
            exit_code=_exit_code(j.get("exit_code")),
            nodes=_nodelist(j.get("nodes")),
            submit_time=_time(j.get("submit_time")),
            start_time=_time(j.get("start_time")),
            end_time=_time(j.get("end_time")),
        )

    @classmethod
    def from_sacct_row(cls, fields: Sequence[str]) -> _SlurmJob:
        job_id, state, exit_code, submit, start, end, nodes, reason, name = fields
        code, _, signal = exit_code.partition(":")
        return cls(
            job_id=job_id,
            key=name,
            state_name=_state_name(state),
            reason=reason or "None",
            exit_code=128 + int(signal) if signal.isdigit() and int(signal) else _int(code),
            nodes=_nodelist(nodes),
            submit_time=_time(submit),
            start_time=_time(start),
            end_time=_time(end),
        )

    def as_job(self) -> Job:
        state = STATE_MAP.get(self.state_name, JobState.UNKNOWN)
        if state is JobState.PENDING:
            reason = PENDING_REASONS.get(self.reason, f"Slurm says: {self.reason}")
        elif state.finished:
            reason = END_REASONS.get(self.state_name) or (
                f"exit code {self.exit_code}"
                if self.exit_code is not None
                else self.state_name.lower()
            )
        else:
            reason = ""
        if state is JobState.UNKNOWN:
            reason = f"unknown Slurm state {self.state_name}"
        return Job(
            backend_id=f"{self.job_id}:{self.key}",
            state=state,
            reason=reason,
            exit_code=self.exit_code if state.finished else None,
            nodes=self.nodes,
            started_at=_dt(self.start_time) if state is not JobState.PENDING else None,
            ended_at=_dt(self.end_time) if state.finished else None,
        )


# -- JSON shapes differ between Slurm releases: read both the plain and the {number} forms --


def _json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BackendError(f"Slurm answered something that is not JSON: {text[:200]!r}") from exc
    errors = data.get("errors") or []
    if errors:
        # "Failed while looking for jobs" (slurm_load_jobs) is what a controller that is
        # starting up or overloaded answers: a passing state, not a refusal.
        if any(str(e.get("source", "")).startswith("slurm_load_") for e in errors):
            raise BackendUnavailable(f"Slurm could not answer: {errors[0].get('description')}")
        raise BackendError(f"Slurm reported errors: {errors}")
    return data


def _scalar(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("set") is False or value.get("infinite"):
            return None
        return value.get("number")
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _state_name(value: Any) -> str:
    value = _scalar(value)
    return str(value or "UNKNOWN").split()[0].upper()


def _time(value: Any) -> int | None:
    value = _scalar(value)
    try:
        value = int(value)
    except (TypeError, ValueError):
        return None
    return value or None


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _dt(epoch: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=UTC) if epoch else None


def _exit_code(value: Any) -> int | None:
    if isinstance(value, dict) and "return_code" in value:
        code = _scalar(value.get("return_code"))
        signal = (
            _scalar((value.get("signal") or {}).get("signal_id"))
            if isinstance(value.get("signal"), dict)
            else None
        )
        if signal:
            return 128 + int(signal)
        return None if code is None else int(code)
    value = _scalar(value)
    if value is None:
        return None
    try:
        raw = int(value)
    except (TypeError, ValueError):
        return None
    # squeue's plain form is the wait status: exit code in the high byte, signal in the low.
    return 128 + (raw & 0x7F) if raw & 0x7F else raw >> 8


def _nodelist(value: Any) -> tuple[str, ...]:
    value = _scalar(value)
    if not value or value in ("None assigned", "(null)"):
        return ()
    return (str(value),)


def _gres_gpus(gres: Any) -> int:
    match = re.search(r"gpu(?::[^:(,]+)?:(\d+)", str(gres or ""))
    return int(match.group(1)) if match else 0


def _minutes(seconds: int) -> int:
    return max(1, math.ceil(seconds / 60))


def _account(project: str) -> str:
    if not _ACCOUNT_RE.match(project):
        raise BackendError(f"project {project!r} cannot be a Slurm account name")
    return project


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name
