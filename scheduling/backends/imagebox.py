"""A job's sandbox over its image's root file system, on either backend (docs/containers.md).

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

Standard library only (no Django): a Slurm node's Prolog imports it too (slurm/puller.py).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence

from scheduling.backends.images.cache import CachedImage
from scheduling.decisions.images import container_argv, container_env
from scheduling.spec import TaskSpec

BUSYBOX = "/.switchyard/busybox"
HOST_BUSYBOX_PATHS = ("/bin/busybox", "/usr/bin/busybox")
# Kept for the job's environment whatever the image says: where its home and tmp are.
_OURS = ("HOME", "TMPDIR")


# The sandbox's system binds an image's entries one by one (rootfs_binds): an image with
# more at its top level and on the way to the sandbox's mount points is refused, so that its
# launch plan stays small (the launcher takes at most 1 MiB a request).
MAX_SYSTEM_ENTRIES = 512
# Where an image's python3 may be, for a live sandbox's agent (a link is fine: it resolves
# inside the image).
IMAGE_PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3", "/bin/python3")


class CannotRun(Exception):
    """The job cannot run in its image; the message says why (it fails only that job)."""


def no_python(reference: str) -> str:
    return (
        f"image {reference} has no python3 (looked for {', '.join(IMAGE_PYTHONS)}): a live "
        "sandbox runs its agent with the image's own python3; pick an image that has one"
    )


def image_python(rootfs: str) -> str | None:
    """The image's python3, or None: a live sandbox in this image cannot run its agent."""
    for path in IMAGE_PYTHONS:
        if os.path.lexists(os.path.join(rootfs, path.lstrip("/"))):
            return path
    return None


def host_busybox() -> str | None:
    for path in HOST_BUSYBOX_PATHS:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("busybox")


def rootfs_binds(rootfs: str, needed: Sequence[str]) -> list[str]:
    """bubblewrap's arguments that show `rootfs` read-only as the sandbox's system, leaving
    room for a mount at each path of `needed` (see the module docstring).

    Nothing is followed out of the image: a folder is entered only if it is one (lstat), a
    needed path is made as an empty folder whatever the image has there (the mount covers
    it), and a link or file on the way to one is refused (CannotRun), since bubblewrap would
    follow the link from the host's root as it makes the mount. An image with more than
    MAX_SYSTEM_ENTRIES entries to bind is refused."""
    args: list[str] = []
    count = 0

    def walk(src: str, dst: str) -> None:
        nonlocal count
        for name in sorted(os.listdir(src)):
            s, d = os.path.join(src, name), f"{dst}/{name}"
            count += 1
            if count > MAX_SYSTEM_ENTRIES:
                raise CannotRun(
                    f"the image has more than {MAX_SYSTEM_ENTRIES} entries at its top level "
                    f"and in the folders on the way to {', '.join(needed)}, which the sandbox "
                    "binds one by one: move them into fewer folders"
                )
            st = os.lstat(s)
            if d in needed:
                args.extend(["--dir", d])  # a mount covers it: what the image has is hidden
            elif any(p.startswith(d + "/") for p in needed):
                if not stat.S_ISDIR(st.st_mode):
                    what = "a link" if stat.S_ISLNK(st.st_mode) else "not a folder"
                    raise CannotRun(
                        f"the image's {d} is {what}, on the way to where the sandbox mounts "
                        f"{next(p for p in needed if p.startswith(d + '/'))}: no link is "
                        "followed there (make it a folder in the image)"
                    )
                args.extend(["--dir", d])
                walk(s, d)
            elif stat.S_ISLNK(st.st_mode):
                args.extend(["--symlink", os.readlink(s), d])
            elif stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
                args.extend(["--ro-bind", s, d])

    walk(rootfs, "")
    return args


def _is_folder_in(rootfs: str, path: str) -> bool | None:
    """Whether `path` (absolute, without ..) is a folder of the image, looked up component
    by component without following a link; None when a link is on the way (then only the
    sandbox, where the image is the root, can say)."""
    at = rootfs
    for name in filter(None, path.split("/")):
        at = os.path.join(at, name)
        try:
            mode = os.lstat(at).st_mode
        except OSError:
            return False
        if stat.S_ISLNK(mode):
            return None
        if not stat.S_ISDIR(mode):
            return False
    return True


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
    try:
        argv = list(container_argv(config.entrypoint, config.cmd, command))
    except ValueError as exc:
        raise CannotRun(f"image {spec.image}: {exc}") from None
    # The site's PATH and LANG unless the image sets its own (or the task does).
    given = {name for name, _ in (*spec.env, *spec.secret_env)}
    base: dict[str, str] = {k: env[k] for k in ("PATH", "LANG") if k in env and k not in given}
    task = [(k, v) for k, v in env.items() if k not in base]
    merged = dict(container_env(config.env, tuple(task)))
    merged = {**base, **merged, **{k: env[k] for k in _OURS if k in env}}
    # Docker makes a WorkingDir the image lacks; a read-only image cannot: its own folder.
    # Looked up inside the image only (bubblewrap's --chdir follows a link inside it).
    there = config.workdir and _is_folder_in(str(image.rootfs), config.workdir) is not False
    return argv, merged, config.workdir if there else work


def busybox_limits(max_processes: int | None, max_file_bytes: int | None) -> list[str]:
    """What runs the command inside an image under the job's limits (after bwrap's `--`)."""
    limits = ["-c 0"]
    if max_processes:
        limits.append(f"-u {max_processes}")
    if max_file_bytes:
        limits.append(f"-f {max(1, max_file_bytes // 512)}")  # 512-byte blocks
    return [BUSYBOX, "sh", "-c", f'ulimit {" ".join(limits)} && exec "$@"', "switchyard-limits"]


def image_run(
    image: CachedImage,
    *,
    command: Sequence[str] | None,
    script: str | None,
    given: Sequence[str],
    work: str,
) -> tuple[list[str], list[tuple[str, str]], str]:
    """What a job whose environment is already set (a Slurm batch script's exports) runs in
    `image`, as `in_image` composes it: the argv, the image's Env entries to set inside the
    sandbox (those the task does not set itself in `given`; never HOME or TMPDIR), and its
    starting folder (the image's WorkingDir if it is a folder there, else `work`)."""
    config = image.config
    wanted = (
        ["/bin/sh", script] if script is not None else None if command is None else list(command)
    )
    try:
        argv = list(container_argv(config.entrypoint, config.cmd, wanted))
    except ValueError as exc:
        raise CannotRun(f"image {image.reference}: {exc}") from None
    skip = {*given, *_OURS}
    env = [(k, v) for k, v in container_env(config.env, ()) if k not in skip]
    there = config.workdir and _is_folder_in(str(image.rootfs), config.workdir) is not False
    return argv, env, config.workdir if there else work
