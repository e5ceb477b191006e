"""File operations inside a storage folder, done by a short-lived helper process that runs as
the folder's job account, never as root (docs/storage.md, "Files").

`run(account, op, root, ...)` starts `python -I -S` on this file as `account` (uid, primary
gid, the project's group), with a socket it answers on: JSON, and for `read` and `temp` the
open file's descriptor (SCM_RIGHTS), which the web process then streams from or into. The
kernel checks every permission as that account; the web process never opens a user's file by
path itself.

No path escapes its folder: a path is split into names, each of which may not be empty, `.`,
`..`, or hold a NUL or a slash; the helper walks them from the folder with `openat` and
O_NOFOLLOW, so a symbolic link anywhere on the way (pointing in or out) is refused rather
than followed. Standard library only: the helper starts in ~20 ms.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import resource
import secrets
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
_RUN = f"import sys; sys.path.insert(0, {HERE!r}); import fileops; sys.exit(fileops.main(sys.argv))"
MAX_NAME_BYTES = 255
MAX_LISTED = 10_000
TEMP_PREFIX = ".upload-"
TEMP_STALE_S = 24 * 3600  # an upload's temporary file older than this was left by a crash
TEMP_SWEEP_SCAN = 100_000  # names an upload looks through for stale temporary files, at most
TIMEOUT_S = 30.0  # for one request, from the helper's start to its answer
MEMORY_BYTES = 512 * 1024 * 1024  # the helper's address space (RLIMIT_AS)

# What a failed operation is called in answers: the API turns each into its status.
NOT_FOUND, EXISTS, NOT_EMPTY, DENIED, NOT_A_FOLDER, IS_A_FOLDER, LINK, INVALID = (
    "not-found",
    "exists",
    "not-empty",
    "denied",
    "not-a-folder",
    "is-a-folder",
    "link",
    "invalid",
)
_ERRNO = {
    errno.ENOENT: NOT_FOUND,
    errno.EEXIST: EXISTS,
    errno.ENOTEMPTY: NOT_EMPTY,
    errno.EACCES: DENIED,
    errno.EPERM: DENIED,
    errno.EROFS: DENIED,
    errno.ENOTDIR: NOT_A_FOLDER,
    errno.EISDIR: IS_A_FOLDER,
    errno.ELOOP: LINK,
}


class FileOpError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def names(path: str) -> list[str]:
    """The names of a relative path ("" is the folder itself), or FileOpError(invalid)."""
    if "\0" in path:
        raise FileOpError(INVALID, "a path must not contain a NUL character")
    if path.startswith("/"):
        raise FileOpError(INVALID, "a path inside a folder is relative: it must not start with /")
    parts = path.removesuffix("/").split("/") if path else []
    for part in parts:
        check_name(part)
    return parts


def check_name(name: str) -> str:
    if name in ("", ".", ".."):
        raise FileOpError(INVALID, f"{name!r} cannot be a file's name here (no '', '.', '..')")
    if "/" in name or "\0" in name:
        raise FileOpError(INVALID, "a name must not contain / or a NUL character")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise FileOpError(INVALID, f"a name is at most {MAX_NAME_BYTES} bytes")
    return name


# --- the helper's side: runs as the account ----------------------------------------------------
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folder(root: str, parts: list[str]) -> int:
    """A descriptor of the folder `parts` below `root`, walked without following a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            try:
                new = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ENOTDIR and _is_link(fd, part):
                    exc.errno = errno.ELOOP  # O_DIRECTORY answers a link with ENOTDIR
                raise
            os.close(fd)
            fd = new
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _entry(dir_fd: int, name: str) -> dict:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    kind = (
        "folder"
        if stat.S_ISDIR(info.st_mode)
        else "file"
        if stat.S_ISREG(info.st_mode)
        else "link"
        if stat.S_ISLNK(info.st_mode)
        else "other"
    )
    return {"name": name, "type": kind, "size": info.st_size, "mtime": int(info.st_mtime)}


def op_list(root: str, path: str) -> tuple[dict, int | None]:
    """The folder's entries, sorted by name: the first MAX_LISTED the folder yields, and
    `truncated` when it holds more (a folder of millions is never read whole)."""
    fd = open_folder(root, names(path))
    try:
        found: list[str] = []
        truncated = False
        with os.scandir(fd) as listing:
            for item in listing:
                if len(found) == MAX_LISTED:
                    truncated = True
                    break
                found.append(item.name)
        entries = []
        for name in sorted(found):
            try:
                entries.append(_entry(fd, name))
            except FileNotFoundError:
                continue  # removed while listed
        return {"entries": entries, "truncated": truncated}, None
    finally:
        os.close(fd)


def op_stat(root: str, path: str) -> tuple[dict, int | None]:
    parts = names(path)
    fd = open_folder(root, parts[:-1])
    if not parts:
        os.close(fd)
        return {"type": "folder"}, None
    try:
        return _entry(fd, parts[-1]), None
    finally:
        os.close(fd)


def op_read(root: str, path: str) -> tuple[dict, int | None]:
    parts = names(path)
    if not parts:
        raise FileOpError(IS_A_FOLDER, "a folder is listed, not read")
    fd = open_folder(root, parts[:-1])
    try:
        file_fd = open_regular(fd, parts[-1])
    finally:
        os.close(fd)
    info = os.fstat(file_fd)
    return {"size": info.st_size, "mtime": int(info.st_mtime)}, file_fd


def open_regular(dir_fd: int, name: str) -> int:
    """`name` in the folder `dir_fd`, opened for reading only if it is a regular file. The
    open does not block (O_NONBLOCK: a FIFO swapped in since a `stat` would otherwise wait for
    a writer) nor follow a link; fstat on the descriptor itself decides, then the descriptor
    blocks again for reading."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    file_fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        mode = os.fstat(file_fd).st_mode
        if stat.S_ISDIR(mode):
            raise FileOpError(IS_A_FOLDER, "a folder is listed, not read")
        if not stat.S_ISREG(mode):
            raise FileOpError(INVALID, "not a regular file (a FIFO, socket or device): not read")
        fcntl.fcntl(file_fd, fcntl.F_SETFL, fcntl.fcntl(file_fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(file_fd)
        raise
    return file_fd


def op_temp(root: str, path: str) -> tuple[dict, int | None]:
    """A new, empty temporary file in the folder of `path` (the upload's target), opened
    for writing; `commit` renames it into place."""
    parts = names(path)
    if not parts:
        raise FileOpError(IS_A_FOLDER, "upload to a file's path, not the folder's")
    fd = open_folder(root, parts[:-1])
    try:
        sweep_stale_temps(fd)
        temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}"
        # O_EXCL: a new file, never a FIFO or a link put there under this random name.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        file_fd = os.open(temp, flags, 0o666, dir_fd=fd)  # the umask decides the mode
    finally:
        os.close(fd)
    return {"temp": temp}, file_fd


def sweep_stale_temps(dir_fd: int, now: float | None = None) -> list[str]:
    """Remove the uploads' temporary files in this folder older than TEMP_STALE_S (a web
    process that died mid-upload leaves one); the names removed. Looks through at most
    TEMP_SWEEP_SCAN names, so a huge folder costs an upload little."""
    now = time.time() if now is None else now
    removed = []
    with os.scandir(dir_fd) as listing:
        for seen, item in enumerate(listing):
            if seen >= TEMP_SWEEP_SCAN:
                break
            if not item.name.startswith(TEMP_PREFIX):
                continue
            try:
                info = os.stat(item.name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and now - info.st_mtime > TEMP_STALE_S:
                    os.unlink(item.name, dir_fd=dir_fd)
                    removed.append(item.name)
            except OSError:
                continue  # gone already, or not ours to remove
    return removed


def op_commit(root: str, path: str, temp: str) -> tuple[dict, int | None]:
    parts = names(path)
    if not parts or not check_name(temp).startswith(TEMP_PREFIX):
        raise FileOpError(INVALID, "not an upload's temporary file")
    fd = open_folder(root, parts[:-1])
    try:
        try:
            mode = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            os.unlink(temp, dir_fd=fd)
            if stat.S_ISLNK(mode):
                raise FileOpError(LINK, "a link of that name is there: remove it first")
            raise FileOpError(IS_A_FOLDER, "a folder of that name is there")
        os.rename(temp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        return _entry(fd, parts[-1]), None
    finally:
        os.close(fd)


def op_discard(root: str, path: str, temp: str) -> tuple[dict, int | None]:
    parts = names(path)
    if not check_name(temp).startswith(TEMP_PREFIX):
        raise FileOpError(INVALID, "not an upload's temporary file")
    fd = open_folder(root, parts[:-1])
    try:
        os.unlink(temp, dir_fd=fd)
        return {}, None
    finally:
        os.close(fd)


def op_delete(root: str, path: str) -> tuple[dict, int | None]:
    """Remove a file (or a link itself) or an empty folder."""
    parts = names(path)
    if not parts:
        raise FileOpError(DENIED, "the folder of an area's owner is not removed here")
    fd = open_folder(root, parts[:-1])
    try:
        if stat.S_ISDIR(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
            os.rmdir(parts[-1], dir_fd=fd)
        else:
            os.unlink(parts[-1], dir_fd=fd)
        return {}, None
    finally:
        os.close(fd)


def op_mkdir(root: str, path: str, parents: bool = False) -> tuple[dict, int | None]:
    """Make the folder `path` (and, with `parents`, the folders above it that are missing)."""
    parts = names(path)
    if not parts:
        raise FileOpError(EXISTS, "the folder is there")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for at, part in enumerate(parts):
            last = at == len(parts) - 1
            if last or parents:
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)  # the umask and a setgid parent decide
                except FileExistsError:
                    if last and not parents:
                        raise
            new = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = new
        return {"name": parts[-1], "type": "folder"}, None
    finally:
        os.close(fd)


OPS: dict[str, Callable[..., tuple[dict, int | None]]] = {
    "list": op_list,
    "stat": op_stat,
    "read": op_read,
    "temp": op_temp,
    "commit": op_commit,
    "discard": op_discard,
    "delete": op_delete,
    "mkdir": op_mkdir,
}


def main(argv: list[str]) -> int:
    """argv: the socket's descriptor, then the request as JSON ({"op", "root", "args"})."""
    # First of all, before it touches a folder: a bound on its memory, so that nothing a
    # folder holds (millions of names) can make it grow past MEMORY_BYTES.
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    sock = socket.socket(fileno=int(argv[1]))
    file_fd = None
    reply: dict[str, object]
    try:
        if os.geteuid() == 0 or os.getuid() == 0:
            raise FileOpError(DENIED, "refusing to touch a user's files as root")
        request = json.loads(argv[2])
        answer, file_fd = OPS[request["op"]](request["root"], *request.get("args", ()))
        reply = {"ok": answer}
    except FileOpError as exc:
        reply = {"error": exc.code, "message": str(exc)}
    except OSError as exc:
        code = _ERRNO.get(exc.errno or 0, DENIED)
        reply = {"error": code, "message": os.strerror(exc.errno or 0)}
    data = json.dumps(reply).encode()
    if file_fd is not None:
        socket.send_fds(sock, [data], [file_fd])
    else:
        sock.sendall(data)
    sock.close()
    return 0


# --- the web process's side -------------------------------------------------------------------


def run(
    account: tuple[int, int, tuple[int, ...]] | None,
    op: str,
    root: str,
    *args: object,
    umask: int = 0o077,
    python: str = "/usr/bin/python3",
) -> tuple[dict, int | None]:
    """Do `op` on `root` as `account` (uid, gid, extra groups; None: as this process, which is
    then not root) in a helper process run by `python` (one the account may run: the
    portal's own may live where only root goes); its answer, and the descriptor it sent, if
    any. Raises FileOpError with the helper's reason."""
    if account is None and os.geteuid() == 0:
        raise FileOpError(DENIED, "refusing to touch a user's files as root")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    request = json.dumps({"op": op, "root": root, "args": list(args)})
    switch: dict = {}
    if account is not None:
        uid, gid, groups = account
        switch = {"user": uid, "group": gid, "extra_groups": list(groups)}
    deadline = time.monotonic() + TIMEOUT_S
    child: subprocess.Popen | None = None
    data, fds = b"", []
    try:
        child = subprocess.Popen(
            [python, "-I", "-S", "-c", _RUN, str(theirs.fileno()), request],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            cwd="/",
            umask=umask,
            **switch,
        )
        theirs.close()
        while True:
            ours.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk, got, _, _ = socket.recv_fds(ours, 1 << 20, 1)
            fds += got
            if not chunk:
                break
            data += chunk
        child.wait(timeout=max(deadline - time.monotonic(), 0.001))
    except (OSError, subprocess.TimeoutExpired) as exc:
        for fd in fds:
            os.close(fd)
        if isinstance(exc, (TimeoutError, subprocess.TimeoutExpired)):
            exc = TimeoutError(f"no answer within {TIMEOUT_S:g} s")
        raise FileOpError(DENIED, f"the file helper failed: {exc}") from None
    finally:
        theirs.close()
        ours.close()
        if child is not None:  # never left behind: a helper past its deadline is killed
            if child.poll() is None:
                child.kill()
            child.wait()
    try:
        reply = json.loads(data or b"{}")
    except ValueError:
        reply = {}
    if "ok" not in reply:
        for fd in fds:
            os.close(fd)
        raise FileOpError(
            reply.get("error", DENIED), reply.get("message", "the file helper failed")
        )
    return reply["ok"], (fds[0] if fds else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
