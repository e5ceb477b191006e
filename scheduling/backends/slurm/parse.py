"""Reading Slurm: its job states and reasons in a researcher's words, and its JSON shapes.

The JSON shapes differ between Slurm releases; the helpers read both the plain and the
`{"number": …}` forms. Slurm 22.05's quirks are listed in docs/slurm.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduling.backends.base import BackendError, BackendUnavailable, Job, JobState

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


@dataclass(frozen=True, slots=True)
class SlurmJob:
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
    def from_squeue(cls, j: Mapping[str, Any]) -> SlurmJob:
        return cls(
            job_id=str(scalar(j.get("job_id"))),
            key=str(j.get("name") or ""),
            state_name=_state_name(j.get("job_state")),
            reason=str(scalar(j.get("state_reason")) or "None"),
            exit_code=_exit_code(j.get("exit_code")),
            nodes=_nodelist(j.get("nodes")),
            submit_time=_time(j.get("submit_time")),
            start_time=_time(j.get("start_time")),
            end_time=_time(j.get("end_time")),
        )

    @classmethod
    def from_sacct_row(cls, fields: Sequence[str]) -> SlurmJob:
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


def slurm_json(text: str) -> dict[str, Any]:
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


def scalar(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("set") is False or value.get("infinite"):
            return None
        return value.get("number")
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _state_name(value: Any) -> str:
    value = scalar(value)
    return str(value or "UNKNOWN").split()[0].upper()


def _time(value: Any) -> int | None:
    value = scalar(value)
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
        code = scalar(value.get("return_code"))
        signal = (
            scalar((value.get("signal") or {}).get("signal_id"))
            if isinstance(value.get("signal"), dict)
            else None
        )
        if signal:
            return 128 + int(signal)
        return None if code is None else int(code)
    value = scalar(value)
    if value is None:
        return None
    try:
        raw = int(value)
    except (TypeError, ValueError):
        return None
    # squeue's plain form is the wait status: exit code in the high byte, signal in the low.
    return 128 + (raw & 0x7F) if raw & 0x7F else raw >> 8


def _nodelist(value: Any) -> tuple[str, ...]:
    value = scalar(value)
    if not value or value in ("None assigned", "(null)"):
        return ()
    return (str(value),)


def gres_gpus(gres: Any) -> int:
    match = re.search(r"gpu(?::[^:(,]+)?:(\d+)", str(gres or ""))
    return int(match.group(1)) if match else 0
