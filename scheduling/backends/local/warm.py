"""The local backend's warm pool of live sandboxes (docs/sandboxes.md).

A warm sandbox is a session started ahead, as the site's service job account, with no task:
it holds no capacity of a node, belongs to no queue and is billed to no one. Its folder is
`jobs/warm-<hex>/` like a job's (its supervisor, its state, its socket), and it is listed in
`<root>/warm/<key>`, not in `active/`, so no scheduling pass sees it. Its state carries its
shape (`warm_shape`: template, cpus, memory).

A claim (sessions.py) hands one to a session's key under the root's lock: the session's own
folder gets a running state that names the warm sandbox's processes and socket, and the warm
folder gets `claimed`, from which its supervisor goes on as the session's (jobwait.py).
`<root>/warm/pool.json` holds what `keep_warm` was last asked, so a claim can start the
replacement. A warm sandbox that ended, or whose claimed session ended, is cleared here.
"""

from __future__ import annotations

import marshal
import os
import secrets
import shutil
import subprocess
import time
from typing import Any, Protocol

from scheduling.backends.base import SubmitRequest, WarmSpec, WarmView
from scheduling.backends.imagebox import CannotRun
from scheduling.backends.local import images as local_images
from scheduling.backends.local import launch, limits
from scheduling.backends.local.jobstore import FINAL, JobStore, read_json, remove_tree, unlink
from scheduling.backends.local.jobstore import write_json_atomic as write_json
from scheduling.decisions.types import NodeAllocation, NodeView, Placement, QueuePolicy
from scheduling.spec import Resources, TaskSpec


class LocalBackend(Protocol):
    """What of the local backend (backend.py) the warm pool reads."""

    root: str
    store: JobStore
    bwrap: str
    python: str
    launcher: bool
    job_account: str
    kill_grace_s: float
    limits: limits.JobLimits
    pid_max: int
    _children: dict[str, subprocess.Popen[bytes]]

    def _inventory(self) -> dict[str, tuple[NodeView, ...]]: ...


PREFIX = "warm-"
# A warm sandbox's agent ends itself after this long without a claim (its backstop); the
# pool's next keep_warm replaces it. Once claimed, it takes its session's idle time.
IDLE_S = 6 * 3600
# A warm sandbox still "starting" this long after it was planned has no supervisor: cleared.
STARTING_S = 60.0
Shape = tuple[str, int, int]  # (template, cpus, memory MiB)


def shape_of(spec: TaskSpec) -> Shape:
    return (template_of(spec), spec.resources.cpus, spec.resources.memory_mib)


def template_of(spec: TaskSpec) -> str:
    """The warm pool a session's spec draws from: "" for the host's system, else its image
    by reference and digest (what WarmSpec.template names)."""
    if not spec.image_digest:
        return ""
    reference = (spec.image or "").split("@", 1)[0]
    return f"{reference}@{spec.image_digest}"


def registry(store: JobStore) -> str:
    path = os.path.join(store.root, "warm")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def instances(store: JobStore) -> list[tuple[str, dict[str, Any]]]:
    """(key, state) of every warm sandbox listed, clearing those that ended (a claimed one
    once its session has ended too): folder and listing."""
    folder = registry(store)
    found = []
    for key in sorted(os.listdir(folder)):
        if not key.startswith(PREFIX) or key.endswith(".json"):
            continue
        state = store.read_state(key) if os.path.isdir(store.jobdir(key)) else None
        if state is None or _ended(store, key, state):
            remove_tree(store.jobdir(key))
            unlink(os.path.join(folder, key))
            continue
        found.append((key, state))
    return found


def _ended(store: JobStore, key: str, state: dict[str, Any]) -> bool:
    if state.get("state") in FINAL:
        return True
    if state.get("state") == "starting":  # its supervisor not running yet: give it a while
        try:
            return time.time() - os.stat(store.path(key, "state.json")).st_mtime > STARTING_S
        except OSError:
            return True
    return not launch.supervisor_alive(store, key, state)


def free(store: JobStore, key: str, state: dict[str, Any]) -> bool:
    """Waiting to be claimed: neither claimed nor being stopped."""
    return not (
        os.path.exists(store.path(key, "claimed")) or os.path.exists(store.path(key, "cancel"))
    ) and state.get("state") in ("starting", "running")


def ready_one(store: JobStore, shape: Shape) -> tuple[str, dict[str, Any]] | None:
    """A running warm sandbox of this shape, free to claim (call under the lock)."""
    for key, state in instances(store):
        if (
            tuple(state.get("warm_shape") or ()) == shape
            and state.get("state") == "running"
            and free(store, key, state)
        ):
            return key, state
    return None


def wanted(store: JobStore) -> dict[Shape, int]:
    data = read_json(os.path.join(registry(store), "pool.json")) or []
    return {(t, int(c), int(m)): int(n) for t, c, m, n in data}


def keep(backend: LocalBackend, specs: list[WarmSpec]) -> list[WarmView]:
    """Keep exactly these pools (call under the lock): start what is missing, stop what is
    over (the newest first); what each holds now."""
    store = backend.store
    pool = {(s.template, s.cpus, s.memory_mb): max(0, s.count) for s in specs}
    write_json(os.path.join(registry(store), "pool.json"), [[*k, n] for k, n in pool.items()])
    return fill(backend, pool)


def fill(backend: LocalBackend, pool: dict[Shape, int]) -> list[WarmView]:
    store = backend.store
    by_shape: dict[Shape, list[tuple[str, dict[str, Any]]]] = {}
    for key, state in instances(store):
        if free(store, key, state):
            by_shape.setdefault(tuple(state.get("warm_shape") or ()), []).append((key, state))
    views = []
    plans: dict[str, dict[str, Any]] = {}
    for shape in sorted(set(pool) | set(by_shape)):
        have, count = by_shape.get(shape, []), pool.get(shape, 0)
        for key, _ in have[count:]:
            with open(store.path(key, "cancel"), "w"):
                pass  # its supervisor stops it within a quarter second
        have = have[:count]
        for _ in range(count - len(have)):
            started = _plan(backend, shape)
            if started is not None:
                plans[started[0]] = started[1]
                have.append((started[0], started[1]["state"]))
        if pool.get(shape):
            ready = sum(1 for _, s in have if s.get("state") == "running")
            views.append(WarmView(template=shape[0], ready=ready, starting=len(have) - ready))
    failed = launch.start_supervisors(
        store, plans, backend.python, launcher=backend.launcher, children=backend._children
    )
    for key in failed:
        remove_tree(store.jobdir(key))
        unlink(os.path.join(registry(store), key))
    return views


def _plan(backend: LocalBackend, shape: Shape) -> tuple[str, dict[str, Any]] | None:
    """A new warm sandbox's folder and launch plan; None when it cannot start (its image is
    not in the cache: a warm pool never pulls)."""
    template, cpus, memory = shape
    store = backend.store
    key = PREFIX + secrets.token_hex(8)
    reference, _, digest = template.partition("@")
    spec = TaskSpec(
        name="warm",
        project="",
        resources=Resources(cpus=cpus, memory_mib=memory),
        image=reference or None,
        image_digest=digest or None,
        session_idle_s=IDLE_S,
    )
    request = SubmitRequest(
        key=key,
        spec=spec,
        type="sandbox",
        queue=QueuePolicy(name="", pool="", task_types=()),
        project="",
        user="",
    )
    placement = Placement(allocations=(NodeAllocation(node="", cpus=cpus, memory_mib=memory),))
    bwrap = shutil.which(backend.bwrap)
    if bwrap is None:
        return None
    image, why = local_images.prepare(backend.root, request, placement)
    if why:
        return None
    os.mkdir(store.jobdir(key), 0o711)
    os.chmod(store.jobdir(key), 0o711)
    try:
        plan = launch.launch_plan(
            store,
            key,
            request,
            placement,
            bwrap=bwrap,
            grace_s=backend.kill_grace_s,
            account=launch.job_account(None, backend.job_account),
            limits=limits.limits_for(
                backend.limits, request, backend._inventory(), pid_max=backend.pid_max
            ),
            image=image,
            pin=local_images.pin_of(backend.root, image),
        )
    except CannotRun:  # its image has no python3: this pool stays empty
        remove_tree(store.jobdir(key))
        return None
    except Exception:
        remove_tree(store.jobdir(key))
        raise
    state = {"state": "starting", "reason": "warm", "warm_shape": list(shape)}
    plan["state"] = state
    plan["warm"] = True
    store.write_state(key, state)
    with open(os.path.join(registry(store), key), "w"):
        pass
    return key, plan


def claim_file(
    store: JobStore, warm_key: str, key: str, state: dict[str, Any], walltime_s: int | None
) -> None:
    """Tell the warm sandbox's supervisor it is now the session `key`'s (jobwait.take_claim)."""
    path = store.path(warm_key, "claimed")
    tmp = f"{path}.{os.getpid()}.tmp"
    claim = {
        "jobdir": store.jobdir(key),
        "state": state,
        "walltime_s": walltime_s,
        "claimed_at": time.time(),
    }
    with open(tmp, "wb") as f:
        marshal.dump(claim, f, 4)
    os.replace(tmp, path)
