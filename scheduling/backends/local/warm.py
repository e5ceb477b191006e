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
from scheduling.backends.local import accounts, launch, limits
from scheduling.backends.local import images as local_images
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
    cgroups: dict | None  # where its jobs' control groups go (cgroup.py)
    cgroups_refused: str  # why no job may start (starting.py)
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
    """The warm pool a session's spec draws from: its template as the portal names it ("" for
    the host's system, else the image reference the session was created with)."""
    template = (spec.image or "") if spec.image_digest else ""
    return (template, spec.resources.cpus, spec.resources.memory_mib)


def cached_digest(root: str, template: str) -> str | None:
    """The digest a warm sandbox of `template` runs: the one it names (`ref@sha256:…`), else
    the most recently used cached image pulled under that reference; None when the cache has
    none (a warm pool never pulls: the first session of it does)."""
    if "@" in template:
        return template.rpartition("@")[2]
    found = [
        image
        for image in local_images.image_cache(root).cached()
        # Cached under the reference it was pulled by, with its digest: `ref@sha256:…`.
        if (ref := image.reference.partition("@")[0]) == template or ref.endswith("/" + template)
    ]
    return max(found, key=lambda image: image.last_used).digest if found else None


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


def ready_one(store: JobStore, shape: Shape, digest: str) -> tuple[str, dict[str, Any]] | None:
    """A running warm sandbox of this shape and image digest ("" without an image), free to
    claim (call under the lock): a tag that moved since it started does not match."""
    for key, state in instances(store):
        if (
            tuple(state.get("warm_shape") or ()) == shape
            and state.get("warm_digest", "") == digest
            and state.get("state") == "running"
            and free(store, key, state)
        ):
            return key, state
    return None


def wanted(store: JobStore) -> dict[Shape, int]:
    data = read_json(os.path.join(registry(store), "pool.json")) or []
    return {(t, int(c), int(m)): int(n) for t, c, m, n in data}


def keep(backend: LocalBackend, specs: list[WarmSpec]) -> list[WarmView]:
    """Keep exactly these pools (call under the lock, `fill`); what each holds now."""
    store = backend.store
    pool = {(s.template, s.cpus, s.memory_mb): max(0, s.count) for s in specs}
    write_json(os.path.join(registry(store), "pool.json"), [[*k, n] for k, n in pool.items()])
    return fill(backend, pool)


def fill(backend: LocalBackend, pool: dict[Shape, int]) -> list[WarmView]:
    """Start what each pool misses and stop what is over its count, or runs an image its
    template no longer names (the tag moved: no claim would take it); what each holds."""
    store = backend.store
    by_shape: dict[Shape, list[tuple[str, dict[str, Any]]]] = {}
    for key, state in instances(store):
        if free(store, key, state):
            by_shape.setdefault(tuple(state.get("warm_shape") or ()), []).append((key, state))
    plans: dict[str, dict[str, Any]] = {}
    held: dict[Shape, list[dict[str, Any]]] = {}
    for shape in sorted(set(pool) | set(by_shape)):
        count = pool.get(shape, 0)
        digest = (cached_digest(backend.root, shape[0]) if shape[0] else "") if count else None
        have = [(k, s) for k, s in by_shape.get(shape, []) if s.get("warm_digest", "") == digest]
        stop = [k for k, s in by_shape.get(shape, []) if (k, s) not in have] + [
            k for k, _ in have[count:]
        ]
        for key in stop:
            with open(store.path(key, "cancel"), "w"):
                pass  # its supervisor stops it within a quarter second
        held[shape] = [s for _, s in have[:count]]
        for _ in range(count - len(held[shape])):
            started = _plan(backend, shape)
            if started is not None:
                plans[started[0]] = started[1]
    failed = launch.start_supervisors(
        store, plans, backend.python, launcher=backend.launcher, children=backend._children
    )
    for key, plan in plans.items():
        if key in failed:
            remove_tree(store.jobdir(key))
            unlink(os.path.join(registry(store), key))
        else:
            held[tuple(plan["state"]["warm_shape"])].append(plan["state"])
    views = []
    for shape, states in held.items():
        if pool.get(shape):
            ready = sum(1 for s in states if s.get("state") == "running")
            views.append(WarmView(template=shape[0], ready=ready, starting=len(states) - ready))
    return views


def _plan(backend: LocalBackend, shape: Shape) -> tuple[str, dict[str, Any]] | None:
    """A new warm sandbox's folder and launch plan; None when it cannot start (its image is
    not in the cache: a warm pool never pulls)."""
    template, cpus, memory = shape
    store = backend.store
    key = PREFIX + secrets.token_hex(8)
    digest = cached_digest(backend.root, template) if template else ""
    if digest is None:
        return None
    spec = TaskSpec(
        name="warm",
        project="",
        resources=Resources(cpus=cpus, memory_mib=memory),
        image=template or None,
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
    if bwrap is None or backend.cgroups_refused:
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
            account=accounts.job_account(None, backend.job_account),
            limits=limits.limits_for(
                backend.limits, request, backend._inventory(), pid_max=backend.pid_max
            ),
            image=image,
            pin=local_images.pin_of(backend.root, image),
            cgroups=backend.cgroups,
        )
    except CannotRun:  # its image has no python3: this pool stays empty
        remove_tree(store.jobdir(key))
        return None
    except Exception:
        remove_tree(store.jobdir(key))
        raise
    state = {
        "state": "starting",
        "reason": "warm",
        "warm_shape": list(shape),
        "warm_digest": digest,
    }
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
