"""A job's working folder made and its inputs checked and linked, as the job's account before
its sandbox starts, without following a symbolic link on the way (docs/storage.md).

Both backends run this: the local supervisor imports it, a Slurm batch script runs its
source with `python3 -I -S` (standard library only, no imports from the portal). Every path
is walked from the mounted folder it lies in (a folder the site configured, opened as it
is), one name at a time with O_NOFOLLOW: a folder on the way swapped for a link by another
member between submission and start is refused, never followed, and the reason given names
only the user's own path, not whether anything exists where the link leads.
"""

import os
import stat
import sys

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """The reason the job does not start (given to the user as it is)."""


def _names(base: str, path: str) -> list[str]:
    names = [n for n in path[len(base) :].split("/") if n]
    if any(n in (".", "..") for n in names):
        raise OSError("a '.' or '..' component")
    return names


def walk(base: str, names: list[str], make: bool = False) -> int:
    """A descriptor of base/names…, reached without following a link (OSError: missing, a
    link, not a folder); `make`: missing folders are made on the way, never through a link."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names:
            if make:
                try:  # noqa: SIM105 (contextlib is an import a job's start would pay for)
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
            inner = os.open(name, _DIR, dir_fd=fd)  # ELOOP or ENOTDIR on a link
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def workdir(base: str, path: str, own: bool, refused: str, taken: str) -> int:
    """The working folder's descriptor, made as needed. `own`: the task's own folder
    (`tasks/<id>`), which must be made by this job, or left by an earlier attempt of it (so
    owned by this account): one that is there already otherwise was put there by someone
    else, and what is in it is not run."""
    try:
        names = _names(base, path)
        if not own or not names:
            return walk(base, names, make=True)
        parent = walk(base, names[:-1], make=True)
    except OSError as exc:
        raise Refused(refused) from exc
    try:
        try:
            os.mkdir(names[-1], 0o777, dir_fd=parent)
        except FileExistsError:
            st = os.stat(names[-1], dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                raise Refused(taken) from None
        return os.open(names[-1], _DIR, dir_fd=parent)
    except OSError as exc:
        raise Refused(refused) from exc
    finally:
        os.close(parent)


def check_input(base: str, path: str) -> bool:
    """Whether the input is there, reached without a link (itself not one either)."""
    try:
        names = _names(base, path)
        if not names:
            return True
        parent = walk(base, names[:-1])
    except OSError:
        return False
    try:
        st = os.stat(names[-1], dir_fd=parent, follow_symlinks=False)
    except OSError:
        return False
    finally:
        os.close(parent)
    return not stat.S_ISLNK(st.st_mode)


def prepare(plan: dict) -> str:
    """Make the working folder and link the inputs into it: "" when done, else why not.

    plan: workdir, workdir_base, own, workdir_refused, workdir_taken, and inputs as
    [path, its base, link name, reason when missing, reason when the name is taken]."""
    try:
        fd = workdir(
            plan["workdir_base"],
            plan["workdir"],
            bool(plan.get("own")),
            plan["workdir_refused"],
            plan["workdir_taken"],
        )
    except Refused as exc:
        return str(exc)
    try:
        for path, base, name, missing, taken in plan.get("inputs") or ():
            if not base or not check_input(base, path):
                return missing
            try:
                os.symlink(path, name, dir_fd=fd)
            except FileExistsError:
                # A link to the input left by an earlier attempt is the same link.
                try:
                    same = os.readlink(name, dir_fd=fd) == path
                except OSError:
                    same = False
                if not same:
                    return taken
            except OSError as exc:
                return f"{taken} ({exc.strerror})"
    finally:
        os.close(fd)
    return ""


if __name__ == "__main__":
    import json  # only here: the local supervisor imports this file and pays for no more

    reason = prepare(json.loads(sys.argv[1]))
    if reason:
        sys.stdout.write(reason)
        sys.exit(1)
