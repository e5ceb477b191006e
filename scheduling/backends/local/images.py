"""A local job in its image (docs/containers.md): the image pulled into the root's image
cache before the job is stored, and its sandbox built over the image's root file system
instead of the host's system.

The sandbox is the one every job gets (sandbox.py): same account, no capabilities, limits,
device files, storage areas, network. What changes is its system: the image's top-level
folders, files and links, each bound read-only (a link made as a link), in place of the
host's /usr, /bin, /lib and /etc. A folder of the image on the way to a path the sandbox must
mount (the job's folders, its storage areas, /dev, /proc, /tmp) is made as an empty folder
on the sandbox's root and its own entries bound one by one, so the image never needs a mount
point it lacks and nothing of it is writable.

The process limits are set inside the sandbox, as for every job; the host's `prlimit` cannot
run over an image's libraries, so the host's static busybox (Debian's busybox-static) is
bound alone at BUSYBOX and sets them with its shell's `ulimit`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from scheduling.backends.base import SubmitRequest
from scheduling.backends.images import CachedImage, ImageCache, ImageError
from scheduling.backends.local.jobstore import JobStore, now_iso
from scheduling.backends.local.ranks import rank_count
from scheduling.decisions.images import (
    ImageRefError,
    container_argv,
    container_env,
    parse_image_ref,
)
from scheduling.decisions.types import Placement
from scheduling.spec import TaskSpec

BUSYBOX = "/.switchyard/busybox"
HOST_BUSYBOX_PATHS = ("/bin/busybox", "/usr/bin/busybox")
BUSYBOX_MISSING = (
    "a task with an image needs the host's static busybox (Debian's busybox-static) to set "
    "its limits inside the image: install it on this machine"
)
# Kept for the job's environment whatever the image says: where its home and tmp are.
_OURS = ("HOME", "TMPDIR")


_CACHES: dict[str, ImageCache] = {}


def image_cache(root: str) -> ImageCache:
    """The image cache of a local backend's root: `<root>/images`."""
    if root not in _CACHES:
        _CACHES[root] = ImageCache(os.path.join(root, "images"))
    return _CACHES[root]


def pull_many(root: str, requests: Sequence[SubmitRequest]) -> dict[str, tuple[bool, str]]:
    """Pull the images of these jobs (those that have one) before they are stored: key ->
    (pulled, what it took or why it failed). A job is stored pending only once its image
    is here, so that its start (under the root's lock) never waits for a registry."""
    out = {}
    for request in requests:
        if request.spec.image_digest:
            image, note = pull(image_cache(root), request.spec)
            out[request.key] = (image is not None, note)
    return out


def create(
    store: JobStore, requests: Sequence[SubmitRequest], pulled: dict[str, tuple[bool, str]]
) -> None:
    """Store these jobs (under the root's lock), recording each one's pull (`pull_many`); a
    job another process made meanwhile is left as it is."""
    for request in requests:
        if store.create(request) and request.key in pulled:
            record_pull(store, request.key, *pulled[request.key])


def record_pull(store: JobStore, key: str, ok: bool, note: str) -> None:
    """Record on a job just stored that its image is here (`pull`: what that took, shown in
    its reason as it starts), or fail it saying why not (a retry pulls again)."""
    state = store.read_state(key) or {}
    if ok:
        state["pull"] = [note]
    else:
        state.update(state="failed", reason=note, ended_at=now_iso())
    store.write_state(key, state)
    if not ok:
        store.retire(key)


def prepare(
    root: str, request: SubmitRequest, placement: Placement
) -> tuple[CachedImage | None, str]:
    """The job's image as it starts (here since its submission, unless evicted meanwhile:
    then pulled again), or why it cannot start; (None, "") for a job without one."""
    if not request.spec.image_digest:
        return None, ""
    if rank_count(request.spec, placement) > 1:
        return None, "a task in an image runs on one node for now (docs/containers.md)"
    if not host_busybox():
        return None, BUSYBOX_MISSING
    image, note = pull(image_cache(root), request.spec)
    return image, "" if image is not None else note


def pin_of(root: str, image: CachedImage | None) -> list[str] | None:
    """What the supervisor holds while the job runs, so that the image is not evicted: the
    image's use lock (shared) and the file that says it is whole."""
    if image is None:
        return None
    hexa = image.digest.partition(":")[2]
    cache = image_cache(root)
    return [str(cache.locks / f"{hexa}.use"), str(cache.images / hexa / "image.json")]


def pull(cache: ImageCache, spec: TaskSpec) -> tuple[CachedImage | None, str]:
    """The job's image, here (pulled by digest if need be), and a line saying what that took;
    or None and why not (the attempt fails with it; a retry pulls again)."""
    try:
        # Named in full at submission: the default registry is never used here.
        ref = parse_image_ref(spec.image, default_registry="localhost")
        ref = ref.with_digest(spec.image_digest or "")
    except ImageRefError as exc:
        return None, f"image {spec.image!r} cannot be pulled: {exc}"
    before = cache.get(ref.digest or "")
    try:
        image = cache.pull(ref)
    except ImageError as exc:
        return None, f"pulling image {spec.image} failed: {exc.reason}"
    if before is not None:
        return image, f"image {spec.image} was cached on this node"
    return image, (
        f"image {spec.image} pulled in {image.pull_seconds:.1f}s "
        f"({image.pull_bytes / 1e6:.1f} MB), not counted in its walltime"
    )


def host_busybox() -> str | None:
    for path in HOST_BUSYBOX_PATHS:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("busybox")


def rootfs_binds(rootfs: str, needed: Sequence[str]) -> list[str]:
    """bubblewrap's arguments that show `rootfs` read-only as the sandbox's system, leaving
    room for a mount at each path of `needed` (see the module docstring)."""
    args: list[str] = []

    def walk(src: str, dst: str) -> None:
        for name in sorted(os.listdir(src)):
            s, d = os.path.join(src, name), f"{dst}/{name}"
            if os.path.islink(s):
                args.extend(["--symlink", os.readlink(s), d])
            elif os.path.isdir(s) and any(p == d or p.startswith(d + "/") for p in needed):
                args.extend(["--dir", d])
                if d not in needed:  # a mount covers it: its entries would be hidden anyway
                    walk(s, d)
            elif os.path.isdir(s) or os.path.isfile(s):
                args.extend(["--ro-bind", s, d])

    walk(rootfs, "")
    return args


def in_image(
    image: CachedImage,
    spec: TaskSpec,
    env: dict[str, str],
    *,
    script: str,
    work: str,
) -> tuple[list[str], dict[str, str], str]:
    """The job's argv, environment and starting folder in `image`, as `docker run` composes
    them: its Entrypoint then the task's command (a script runs with the image's /bin/sh),
    or its Cmd; its Env under the task's; its WorkingDir, unless the task names a folder of
    its storage (the caller's), else the job's own work folder when the image names none."""
    config = image.config
    command = list(spec.command) if spec.command is not None else None
    if spec.script is not None:
        command = ["/bin/sh", script]
    argv = list(container_argv(config.entrypoint, config.cmd, command))
    # The site's PATH and LANG unless the image sets its own (or the task does).
    given = {name for name, _ in (*spec.env, *spec.secret_env)}
    base: dict[str, str] = {k: env[k] for k in ("PATH", "LANG") if k in env and k not in given}
    task = [(k, v) for k, v in env.items() if k not in base]
    merged = dict(container_env(config.env, tuple(task)))
    merged = {**base, **merged, **{k: env[k] for k in _OURS if k in env}}
    # Docker makes a WorkingDir the image lacks; a read-only image cannot: its own folder.
    there = config.workdir and os.path.isdir(os.path.join(image.rootfs, config.workdir[1:]))
    return argv, merged, config.workdir if there else work


def busybox_limits(max_processes: int | None, max_file_bytes: int | None) -> list[str]:
    """What runs the command inside an image under the job's limits (after bwrap's `--`)."""
    limits = ["-c 0"]
    if max_processes:
        limits.append(f"-u {max_processes}")
    if max_file_bytes:
        limits.append(f"-f {max(1, max_file_bytes // 512)}")  # 512-byte blocks
    return [BUSYBOX, "sh", "-c", f'ulimit {" ".join(limits)} && exec "$@"', "switchyard-limits"]
