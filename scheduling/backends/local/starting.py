"""Preparing a local job's start, under the root's lock, in the scheduling pass that placed
it: its account, its network, its image (pinned, never pulled here: pulls.py), its state
marked starting and its supervisor's launch plan (launch.py)."""

from __future__ import annotations

import os
import shutil
import stat
import time
from typing import Protocol

from django.conf import settings

from scheduling.backends.base import SubmitRequest
from scheduling.backends.local import accounts, launch, limits, pulls
from scheduling.backends.local import images as local_images
from scheduling.backends.local.jobstore import JobStore
from scheduling.backends.local.shim import BWRAP_MISSING
from scheduling.backends.sandbox import BlockedNetworksError, job_network
from scheduling.decisions.types import NodeView, Placement


class Backend(Protocol):
    """What of the local backend (backend.py) a start reads."""

    bwrap: str
    job_account: str
    root: str
    store: JobStore
    kill_grace_s: float
    limits: limits.JobLimits
    pid_max: int
    slirp4netns: str
    cgroups: dict | None  # where its jobs' control groups go (cgroup.py)
    cgroups_refused: str  # why no job may start (a configured folder that cannot hold them)

    def _inventory(self) -> dict[str, tuple[NodeView, ...]]: ...

    def _fail_unstarted(self, key: str, reason: str) -> None: ...


def prepare_start(
    backend: Backend, key: str, request: SubmitRequest, placement: Placement, state: dict
) -> dict | None:
    """Mark the job starting; its supervisor's launch plan, or None if it failed.
    `state` is the job's pending state as this pass read it (under the lock)."""
    bwrap = shutil.which(backend.bwrap)
    # Never run a task without its sandbox, or without the control groups the site asked for.
    if bwrap is None or backend.cgroups_refused:
        backend._fail_unstarted(key, backend.cgroups_refused or BWRAP_MISSING)
        return None
    try:
        account = accounts.job_account(request.extra.get("run_as"), backend.job_account)
        networks = job_network(request.type)  # what it must not reach; None: no network
    except (accounts.JobAccountError, BlockedNetworksError) as exc:
        backend._fail_unstarted(key, str(exc))
        return None
    why = unreachable_by_others(backend.root) if account else None
    image, why = (None, why) if why else local_images.prepare(backend.root, request, placement)
    if why == local_images.EVICTED:
        pulls.again(state, time.time())
        backend.store.write_state(key, state)
        return None
    if why:
        backend._fail_unstarted(key, why)
        return None
    state.update(
        state="starting",
        reason=f"starting on {', '.join(placement.nodes)}",
        nodes=list(placement.nodes),
        queue=request.queue.name,
        # Its running reason: placed across switches, what its image's pull took.
        note="; ".join(filter(None, [placement.note, pulls.note(state)])),
        # Where it runs: the capacity a pass books for it while it lives.
        allocations=backend.store.remember_alloc(key, placement),
        # What it holds, kept with the final state for accounting (usage()).
        alloc={
            "cpus": sum(a.cpus for a in placement.allocations),
            "gpus": sum(len(a.gpu_indices) for a in placement.allocations),
            "memory_mib": sum(a.memory_mib for a in placement.allocations),
            "nodes": len(placement.allocations),
        },
    )
    try:
        grace = float(request.extra.get("kill_grace_s", backend.kill_grace_s))
    except ValueError:
        grace = backend.kill_grace_s
    plan = launch.launch_plan(
        backend.store,
        key,
        request,
        placement,
        bwrap=bwrap,
        grace_s=grace,
        account=account,
        limits=limits.limits_for(
            backend.limits, request, backend._inventory(), pid_max=backend.pid_max
        ),
        blocked=networks,
        slirp4netns=backend.slirp4netns,
        image=image,
        pin=local_images.pin_of(backend.root, image),  # held by the supervisor while it runs
        cgroups=backend.cgroups,
        api_web=settings.SWITCHYARD_WEB_ADDR,  # a batch task's relay to the sandbox API
    )
    plan["state"] = state  # the supervisor continues from this state
    plan["gpu_watch"] = gpu_watch(state["alloc"]["gpus"])
    backend.store.write_state(key, state)
    return plan


def gpu_watch(gpus: int) -> dict | None:
    """How the supervisor samples a GPU job's use (gpuwatch.py): nvidia-smi as this worker
    finds it on PATH, every SWITCHYARD_GPU_SAMPLE_S. None for a job without GPUs, or where
    there is no nvidia-smi (virtual GPUs: nothing to measure)."""
    smi = shutil.which("nvidia-smi") if gpus else None
    return {"smi": smi, "every_s": settings.SWITCHYARD_GPU_SAMPLE_S} if smi else None


def unreachable_by_others(root: str) -> str | None:
    """Why another account could not reach its job's folder under `root`, if it cannot.

    The sandbox is set up by the job's own account, which must be able to pass through every
    folder above its work folder (o+x).
    """
    path = root
    while True:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return (
                f"the local backend's folder {root} cannot be reached by the job's account: "
                f"{path} is not passable by others (chmod o+x it, or move the root: "
                "SWITCHYARD_LOCAL_ROOT)"
            )
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
