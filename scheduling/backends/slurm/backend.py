"""Slurm, driven through its own commands with JSON output (sbatch, squeue, sacct, scontrol…).

Mapping (docs/slurm.md): queue ↔ partition, project ↔ account, whole-node ↔
`--exclusive`, gpus ↔ `--gres=gpu:N` per node (or `--gpus=N` when no node count is given),
a GPU model ↔ `--constraint` (a node feature), walltime ↔ `--time` (the estimate is not
passed: see `sbatch_command`), the attempt key ↔ `--job-name`, so `find(key)`
finds a job a crashed dispatcher already made and `--dependency=singleton` stops a duplicate
from ever running beside it.

Nothing from a descriptor reaches a shell or an `#SBATCH` line unquoted:
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

import logging
import math
import os
import pwd
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from scheduling.backends import storage
from scheduling.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    Job,
    JobState,
    SubmitRequest,
    decode_log,
    submit_concurrently,
)
from scheduling.backends.devices import SHELL_DEVICES, slurm_lines
from scheduling.backends.imagebox import BUSYBOX, busybox_limits
from scheduling.backends.sandbox import TMPFS, job_network, sandbox_argv
from scheduling.backends.slurm import imagejob, secret_env
from scheduling.backends.slurm.accounts import SlurmAccounts, account_name
from scheduling.backends.slurm.capacity import SlurmCapacity
from scheduling.backends.slurm.commands import CommandRunner
from scheduling.backends.slurm.jobfolder import prepare_job_folder, with_input_reason
from scheduling.backends.slurm.parse import PENDING_REASONS, SlurmJob, gres_gpus, scalar, slurm_json
from scheduling.backends.slurm.prepull import SlurmPrepull
from scheduling.backends.slurm.session import SlurmSessions
from scheduling.backends.slurm.steps import step_access
from scheduling.backends.slurm.usage import SlurmUsage
from scheduling.backends.slurm.watch import watched
from scheduling.decisions.types import NodeView

log = logging.getLogger(__name__)

_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_LEASE_RE = re.compile(r"^lease-[0-9]{1,18}$")
_PORTAL_RE = re.compile(r"^[a-z0-9]{1,16}$")
# What sacct reports of a job. JobName goes last so a '|' in someone else's job name cannot
# shift the columns.
SACCT_FIELDS = "JobIDRaw,State,ExitCode,Submit,Start,End,NodeList,Reason,JobName"

_ALREADY_GONE = (
    "already completing or completed",
    "Invalid job id specified",
    "Job/step already completing",
)


class SlurmBackend(SlurmAccounts, SlurmCapacity, SlurmUsage, SlurmPrepull, SlurmSessions, Backend):
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
        max_processes: int = 512,
        max_file_bytes: int = 10 << 30,
        switch_wait_s: int = 600,
        submit_concurrency: int = 4,
        multinode_host_network: bool = False,
        node_image_cache: str | None = None,
        session_dir: str = "/tmp",
    ) -> None:
        self.alias = alias
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.qos = qos
        # Jobs of researchers without a cluster account of their own run as this account;
        # without one they are refused: a job never runs as the portal's own user (root).
        self.service_account = service_account
        self.slurm_conf = slurm_conf
        self.max_processes = max_processes
        self.max_file_bytes = max_file_bytes
        self.switch_wait_s = switch_wait_s
        self.sacct_window_days = sacct_window_days
        self.submit_concurrency = submit_concurrency
        # Multi-node jobs share their node's network, for srun (slurm/steps.py): only where
        # the site's network keeps the portal's services out of the compute nodes' reach.
        self.multinode_host_network = multinode_host_network
        # A node's image cache as this host sees it, "<folder>/{node}" (slurm/prepull.py).
        self.node_image_cache = node_image_cache
        # Node-local, where each live sandbox's watcher makes its folder (slurm/session.py).
        self.session_dir = session_dir
        self.run = runner or CommandRunner(
            slurm_conf=slurm_conf, timeout_s=command_timeout_s, bin_dir=bin_dir
        )
        self._known_associations: set[tuple[str, str]] = set()

    # -- submit ---------------------------------------------------------------------------

    def submit_many(self, requests: list[SubmitRequest]) -> list[Job | BackendError]:
        """Each its own sbatch, `submit_concurrency` at once (docs/slurm.md)."""
        return submit_concurrently(self._sbatch, requests, workers=self.submit_concurrency)

    def _sbatch(self, request: SubmitRequest) -> Job:
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
        account = account_name(request.project)
        out_dir = self.workdir / request.key
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={request.key}",
            f"--comment={job_comment(request)}",
            f"--partition={','.join([request.queue.name, *_extra_partitions(request)])}",
            f"--account={account}",
            "--export=NONE",
            "--dependency=singleton",
            f"--chdir={out_dir}",
            f"--output={out_dir}/output.log",
            f"--mem={res.memory_mib}M",
        ]
        if self.qos:
            argv.append(f"--qos={self.qos}")
        if request.priority > 0:
            # The portal's order (level, weight, fair share) as the job's priority; only an
            # operator (root here) may set it. Level changes later: set_priority.
            argv.append(f"--priority={min(int(request.priority), 4_294_967_294)}")
        if res.nodes:
            argv += [
                f"--nodes={res.nodes}",
                f"--ntasks={res.cpus}",
                f"--ntasks-per-node={res.cpus // res.nodes}",
            ]
            if res.nodes > 1:
                # Under one leaf switch if one frees up within the wait (topology.conf).
                argv.append(f"--switches=1@{_minutes(self.switch_wait_s)}")
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
        if res.gpu_type:
            # Each node's GPU model is one of its features (the generated slurm.conf).
            argv.append(f"--constraint={res.gpu_type}")
        if spec.walltime_s:
            argv.append(f"--time={_minutes(spec.walltime_s)}")
        # The estimate is not passed as --time-min: Slurm 22.05's backfill may lower a job's
        # time limit to its --time-min, killing it at its estimate (docs/slurm.md).
        if request.queue.allocation == "whole-node":
            argv.append("--exclusive")
        # Both: sbatch run by root with --uid alone keeps root's group (gid 0) for the job.
        user = pwd.getpwnam(self._unix_user(request))
        argv += [f"--uid={user.pw_name}", f"--gid={user.pw_gid}"]
        return argv, self.batch_script(request)

    def batch_script(self, request: SubmitRequest) -> str:
        spec = request.spec
        if spec.session_idle_s is not None:
            return self.session_script(request)  # a live sandbox (slurm/session.py)
        # Slurm reads gres.conf beside slurm.conf.
        conf = os.path.dirname(self.slurm_conf or "/etc/slurm/slurm.conf")
        devices = slurm_lines(request.devices, spec.resources.gpus, os.path.join(conf, "gres.conf"))
        lines = [
            "#!/bin/bash",
            # A command before anything from the descriptor: Slurm reads #SBATCH directives
            # only until the first command, so none can hide in a user's script.
            ":",
            # The device files of the GPUs Slurm gave it, before anything the job sets.
            *devices,
            f"export SWITCHYARD_TASK_KEY={shlex.quote(request.key)}",
            # With --export=NONE an srun inside the job would get an empty environment.
            "export SLURM_EXPORT_ENV=ALL",
        ]
        for name, value in spec.env:
            if not _ENV_NAME_RE.match(name):
                raise BackendError(f"environment name {name!r} is not allowed")
            lines.append(f"export {name}={shlex.quote(value)}")
        workdir = self.workdir / request.key
        lines += secret_env.prepare(workdir, spec.secret_env, self._unix_user(request))
        image = spec.image_digest is not None
        if image:
            # Run as its image says, over its root file system (imagejob.py): known once
            # the node's Prolog has pulled it.
            argv = [imagejob.SHELL_ARGV]
        elif spec.command is not None:
            argv = list(spec.command)
        elif spec.script is not None:
            argv = ["/bin/bash", str(workdir / "script.sh")]
        else:
            raise BackendError("the task has neither a command nor a script")
        # Every type runs in the sandbox, as on the local backend (docs/security.md); the
        # real HOME is not in it, the job folder is.
        lines += [f"export HOME={shlex.quote(str(workdir))}", "export TMPDIR=/tmp"]
        lines += storage.script_lines(request, str(workdir))
        lines.append(
            "command -v bwrap >/dev/null || { echo 'bubblewrap (bwrap) is not installed on "
            "this node: tasks never run unsandboxed' >&2; exit 127; }"
        )
        # What srun and MPI need inside: the configuration, munge, the node's network for
        # a multi-node job (steps.py).
        steps = step_access(request, self.slurm_conf, host_network=self.multinode_host_network)
        script = str(workdir / "script.sh") if spec.script is not None else None
        readonly = [script] if script else []
        readonly += steps.readonly
        lines += steps.lines
        chdir = storage.workdir(request, str(workdir))
        if image:
            lines += imagejob.script_lines(self.workdir, request.key)
            chdir = imagejob.SHELL_CHDIR
        prefix = sandbox_argv(
            "bwrap",
            writable=[str(workdir)],
            readonly=readonly,
            mounts=storage.mounts(request),  # the site's storage areas of its pool
            hide=str(self.workdir),
            chdir=chdir,
            tmp_bytes=spec.resources.memory_mib << 20,
            max_processes=self.max_processes,
            max_file_bytes=self.max_file_bytes,
            devices=[SHELL_DEVICES] if devices else [],
            share_net=steps.host_network,
            system=[imagejob.SHELL_SYSTEM] if image else None,
            runner=busybox_limits(self.max_processes, self.max_file_bytes) if image else None,
        )
        argv = [*prefix, *argv]
        # Written into the script as data: the watcher connects a batch job's network with
        # these, and the node's own addresses, out of reach (jobnet.py).
        network = None if steps.host_network else job_network(request.type)
        lines += watched(argv, str(self.usage_path(request.key)), network)
        entry = pwd.getpwnam(self._unix_user(request))
        prepare_job_folder(self.workdir, request, entry, self.usage_path)
        if image:
            # What the node's Prolog pulls and how the job runs there; the paths its
            # sandbox mounts, which the image's own entries must leave room for.
            needed = ["/dev", "/proc", *TMPFS, BUSYBOX, str(self.workdir), *readonly]
            needed += [path for path, _ in storage.mounts(request)]
            imagejob.write_image_file(
                self.workdir,
                request,
                entry.pw_uid,
                needed=needed,
                work=str(workdir),
                chdir=request.storage.workdir,
                script=script,
            )
        return "\n".join(lines) + "\n"

    def usage_path(self, key: str) -> Path:
        return self.workdir / f"{key}.cpu"

    def _unix_user(self, request: SubmitRequest) -> str:
        """The researcher's cluster account if they have one, else the service account.

        Never root: an account with uid or gid 0 is refused, and so is a job with neither.
        """
        name = request.extra.get("run_as") or self.service_account
        if not name:
            raise BackendError(
                "no Unix account to run the job as: the researcher has no cluster account "
                "and no service account is set (SWITCHYARD_SLURM_SERVICE_ACCOUNT)"
            )
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise BackendError(f"no Unix account {name!r} on this host") from None
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise BackendError(f"refusing to run a job as {name!r}: it is root (uid or gid 0)")
        return name

    def cluster_accounts(self) -> SlurmBackend:
        """Projects are Slurm accounts (accounts.py)."""
        return self

    # -- follow ------------------------------------------------------------------------------

    def find(self, key: str) -> Job | None:
        """The job an earlier submit made under `key`, live or finished, or None."""
        for job in self._squeue(names=[key]):
            if job.key == key:
                return self._live(job)
        for job in self._sacct(names=[key]):
            if job.key == key:
                return self._ended(job.as_job())
        return None

    def _live(self, job: SlurmJob) -> Job:
        """squeue's job, with its image's pull while its Prolog runs (imagejob.py)."""
        return imagejob.with_pull(self.workdir, job.as_job(), in_prolog=job.reason == "Prolog")

    def _ended(self, job: Job) -> Job:
        """A finished job, with the reason its script left (an input, its image)."""
        job = with_input_reason(self.workdir, job)
        return imagejob.with_pull(self.workdir, job, in_prolog=False)

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
            ours = wanted.get(job.job_id)
            if ours is None or job.key != ours[1]:
                continue  # a reused job id: not our job
            current = self._live(job)
            (ended if current.state.finished else result)[ours[0]] = current
        missing = [job_id for job_id, (bid, _) in wanted.items() if bid not in result]
        accounting_down = False
        if missing:
            # Finished jobs: sacct has the exit code and the accounting Slurm keeps.
            try:
                finished = self._sacct(job_ids=missing)
            except BackendError as exc:
                if not ended:
                    raise
                # slurmdbd down: squeue still shows recent ends; the rest wait for it.
                log.warning("sacct failed; following ended jobs from squeue: %s", exc)
                finished, accounting_down = [], True
            for job in finished:
                ours = wanted.get(job.job_id)
                if ours is not None and ours[0] and job.key == ours[1]:
                    result[ours[0]] = self._ended(job.as_job())
        for backend_id, _ in wanted.values():
            if backend_id in result:
                continue
            if backend_id in ended:
                result[backend_id] = self._ended(ended[backend_id])
            elif not accounting_down:
                result[backend_id] = Job(
                    backend_id, JobState.UNKNOWN, "Slurm no longer knows the job"
                )
        return result

    def _squeue(self, *, job_ids: Sequence[str] = (), names: Sequence[str] = ()) -> list[SlurmJob]:
        argv = ["squeue", "--json", "--all"]
        if job_ids:
            argv.append("--jobs=" + ",".join(job_ids))
        if names:
            argv.append("--name=" + ",".join(names))
        try:
            data = slurm_json(self.run(argv))
        except BackendError as exc:
            # squeue --jobs with ids it no longer knows exits 1 with "Invalid job id".
            if "Invalid job id" in str(exc):
                return []
            raise
        return [SlurmJob.from_squeue(j) for j in data.get("jobs", [])]

    def _sacct(self, *, job_ids: Sequence[str] = (), names: Sequence[str] = ()) -> list[SlurmJob]:
        # Parsable text, not --json: Slurm 22.05's `sacct --json` reports exit code 0 for a
        # job that exited 3 (docs/slurm.md).
        window = f"--starttime=now-{self.sacct_window_days}days"
        argv = ["sacct", "-X", "-P", "-n", window, f"--format={SACCT_FIELDS}"]
        if job_ids:
            argv.append("--jobs=" + ",".join(job_ids))
        if names:
            argv.append("--name=" + ",".join(names))
        jobs = []
        for line in self.run(argv).splitlines():
            fields = line.split("|", 8)
            if len(fields) == 9 and fields[0].isdigit():
                jobs.append(SlurmJob.from_sacct_row(fields))
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

    def nodes(self) -> list[NodeView]:
        data = slurm_json(self.run(["sinfo", "--json"]))
        views = []
        for node in data.get("nodes", []):
            state = str(scalar(node.get("state")) or "").upper()
            gpus = gres_gpus(node.get("gres", ""))
            views.append(
                NodeView(
                    name=node.get("name") or node.get("hostname"),
                    cpus=int(scalar(node.get("cpus")) or 0),
                    memory_mib=int(scalar(node.get("real_memory")) or 0),
                    gpus=gpus,
                    free_cpus=int(scalar(node.get("idle_cpus")) or 0)
                    if "idle_cpus" in node
                    else None,
                    available=not any(s in state for s in ("DRAIN", "DOWN", "FAIL", "INVAL")),
                )
            )
        return views

    def log_path(self, backend_id: str) -> str:  # `--output`, under the portal's workdir
        return str(self.workdir / backend_id.partition(":")[2] / "output.log")

    def log(self, backend_id: str, *, offset: int = 0, limit: int = 1 << 20) -> str:
        try:
            with open(self.log_path(backend_id), "rb") as fh:
                fh.seek(offset)
                return decode_log(fh.read(limit))
        except FileNotFoundError:
            return ""


def _minutes(seconds: int) -> int:
    return max(1, math.ceil(seconds / 60))


def job_comment(request: SubmitRequest) -> str:
    """`switchyard <portal instance> <key>`: reconciliation counts only its own portal's jobs."""
    portal = request.extra.get("portal", "")
    return (
        f"switchyard {portal} {request.key}"
        if _PORTAL_RE.match(portal)
        else f"switchyard {request.key}"
    )


def _extra_partitions(request: SubmitRequest) -> list[str]:
    """Partitions of leases the engine found this task may use (docs/capacity.md)."""
    names = [p for p in (request.extra.get("lease_partitions") or "").split(",") if p]
    return [p for p in names if _LEASE_RE.match(p)]
