"""The owners' folders of the storage areas, made on the worker's side (root) with the right
owner and mode; and the Unix group of each project (docs/storage.md).

A project's folder is root's, group the project's (`sy-project-<slug>`, whose members are the
project's job accounts), mode 2770: its members' jobs read and write it, the set-group bit
gives what they make the project's group, and no other project's account gets in. A user's
folder is their job account's, mode 0700. A site area's one folder is root's, 0755 (its
admins fill it). An area's base folder (`/scratch`) is root's, 0711: passable, not listable.

Nothing here follows a link: a folder is made and opened below its base with O_NOFOLLOW and
changed through its descriptor, so a link planted where a folder is expected changes nothing.
A worker that is not root makes the folders as itself (its jobs run as itself too).
"""

from __future__ import annotations

import errno
import grp
import logging
import os
import pwd
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from scheduling.decisions.storage import project_group

log = logging.getLogger(__name__)

PROJECT_MODE = 0o2770
USER_MODE = 0o700
SITE_MODE = 0o755
BASE_MODE = 0o711
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def group_id(name: str) -> int | None:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def account_ids(name: str) -> tuple[int, int] | None:
    """(uid, primary gid) of a Unix account, or None when there is none."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def ensure_project_group(
    slug: str, accounts: list[str], *, admit: Callable[[str], bool] | None = None
) -> int | None:
    """The gid of the project's group, made if missing, with `accounts` among its members
    (the accounts Slurm's jobs get their groups from). None when this process is not root.

    `admit(account)` is asked right before an account is added: a member removed since the
    caller looked is not put back (it returns False, and the account is left out)."""
    if os.geteuid() != 0:
        return None
    name = project_group(slug)
    if group_id(name) is None:
        _group_tool(["groupadd", "--system", name], made=lambda: group_id(name) is not None)
        log.info("made the Unix group %s of project %s", name, slug)
    members = set(grp.getgrnam(name).gr_mem)
    for account in accounts:
        if account in members or account_ids(account) is None:
            continue
        if admit is not None and not admit(account):
            log.info("%s is not added to the Unix group %s: no member of %s", account, name, slug)
            continue
        _group_tool(["gpasswd", "-a", account, name], made=_member(account, name))
    return group_id(name)


def project_group_members(slug: str) -> list[str] | None:
    """The accounts in the project's group (/etc/group's list), or None when it has none."""
    try:
        return list(grp.getgrnam(project_group(slug)).gr_mem)
    except KeyError:
        return None


def leave_project_group(slug: str, account: str) -> bool:
    """Take `account` out of the project's group (a member left the project); whether it was
    in it. Nothing to do when this process is not root (it made no groups)."""
    if os.geteuid() != 0:
        return False
    name = project_group(slug)
    try:
        if account not in grp.getgrnam(name).gr_mem:
            return False
    except KeyError:
        return False
    _group_tool(["gpasswd", "-d", account, name], made=lambda: not _member(account, name)())
    log.info("took %s out of the Unix group %s of project %s", account, name, slug)
    return True


def _member(account: str, group: str) -> Callable[[], bool]:
    return lambda: account in grp.getgrnam(group).gr_mem


def _group_tool(argv: list[str], *, made: Callable[[], bool], tries: int = 5) -> None:
    """Run groupadd or gpasswd; another process holding /etc/group's lock (or making the
    same group) meanwhile is waited out, not an error."""
    for attempt in range(tries):
        done = subprocess.run(argv, capture_output=True, check=False)
        if done.returncode == 0 or made():
            return
        if attempt == tries - 1:
            raise subprocess.CalledProcessError(done.returncode, argv, stderr=done.stderr)
        time.sleep(0.1 * (attempt + 1))


def ensure_base(base: str) -> None:
    """An area's base folder: passable and not listable, with every folder this makes above it
    (the portal's umask would leave them closed to the jobs' accounts)."""
    missing = []
    path = base
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        try:
            os.mkdir(path, BASE_MODE)
        except FileExistsError:
            continue
        os.chmod(path, BASE_MODE)


def ensure_folder(base: str, name: str, *, uid: int | None, gid: int | None, mode: int) -> str:
    """`<base>/<name>`, made with this owner and mode if missing (an existing folder is left
    as its admins set it). `name` "" is the base itself (a site area's one folder)."""
    if not name:
        base, name = os.path.split(base.rstrip("/"))
    ensure_base(base)
    if "/" in name or name in (".", ".."):
        raise ValueError(f"{name!r} is not a folder's name")
    base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            os.mkdir(name, 0o700, dir_fd=base_fd)
            made = True
        except FileExistsError:
            made = False
        fd = os.open(name, _DIR, dir_fd=base_fd)  # a link planted here is refused (ELOOP)
        try:
            if made:
                if os.geteuid() == 0:
                    os.fchown(fd, 0 if uid is None else uid, 0 if gid is None else gid)
                os.fchmod(fd, mode if os.geteuid() == 0 else USER_MODE)
            elif not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise NotADirectoryError(name)
        finally:
            os.close(fd)
    finally:
        os.close(base_fd)
    return os.path.join(base, name)


@contextmanager
def tasks_folder(base: str, name: str, tasks: str) -> Iterator[int | None]:
    """An open descriptor of `<base>/<name>/<tasks>` (a project folder's tasks' folders), or
    None when it is not there. Neither below the base is followed if it is a link: the
    project's members may plant one where `tasks` was, and root must not be led by it."""
    fds: list[int] = []
    try:
        fds.append(os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in (name, tasks):
            fds.append(os.open(part, _DIR, dir_fd=fds[-1]))
    except (FileNotFoundError, NotADirectoryError):
        fds.append(-1)
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # a link: as if not there
            raise
        fds.append(-1)
    try:
        yield None if fds[-1] < 0 else fds[-1]
    finally:
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def remove_folder(dir_fd: int, name: str) -> bool:
    """Remove the folder `name` in the open folder `dir_fd` with all it holds, following no
    link (shutil's descriptor-based rmtree: a link inside is removed, never what it points
    to, even one swapped in while it runs); False, and nothing removed, when `name` is not a
    folder (a link where the folder was is left alone)."""
    try:
        if not stat.S_ISDIR(os.lstat(name, dir_fd=dir_fd).st_mode):
            return False
    except FileNotFoundError:
        return False
    if not shutil.rmtree.avoids_symlink_attacks:  # Linux's works through descriptors
        raise OSError(errno.ENOTSUP, "this platform's rmtree may follow links")
    shutil.rmtree(name, dir_fd=dir_fd)
    return True
