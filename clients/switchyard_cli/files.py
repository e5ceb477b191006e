"""`switchyard files`: your storage folders from a terminal, over the Files API
(docs/storage.md): `ls`, `get`, `put`, `rm`, `mkdir`.

A path is the one the Files page shows: `<area>/<owner>/<path>`, e.g.
`projects/materials/tasks/42/model.pt` (a site area has no owner part: `datasets/ref.txt`).
Downloads and uploads are streamed: a file is never held in memory whole.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import IO, Any

from switchyard_cli.client import (
    BAD_INPUT,
    OK,
    UNREACHABLE,
    Client,
    CliError,
    client,
    http_error,
)

CHUNK = 1 << 20


def _url(api: Client, path: str, *, folder: bool = False) -> str:
    quoted = urllib.parse.quote(path.strip("/"), safe="/")
    if not quoted:
        return f"{api.url}/api/v1/files/"
    return f"{api.url}/api/v1/files/{quoted}{'/' if folder else ''}"


def _open(api: Client, method: str, url: str, **kwargs: Any):
    """The answer to one request, open (the caller reads and closes it)."""
    request = urllib.request.Request(url, method=method, **kwargs)
    request.add_header("Accept", "application/json")
    if api.token:
        request.add_unredirected_header("Authorization", f"Token {api.token}")
    try:
        return urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as exc:
        raise http_error(exc) from None
    except (urllib.error.URLError, OSError) as exc:
        raise CliError(f"cannot reach {api.url}: {exc}", UNREACHABLE) from None


def _is_json(answer) -> bool:
    return (answer.headers.get("Content-Type") or "").startswith("application/json")


def _json(answer) -> Any:
    with answer:
        raw = answer.read()
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        raise CliError("the portal's answer is not JSON: check --url", UNREACHABLE) from None


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def cmd_ls(args, out) -> int:
    api = client(args)
    if not args.path.strip("/"):
        folders = _json(_open(api, "GET", _url(api, "")))["folders"]
        lines = [
            f"{f['path'] + '/':<40} {'read-write' if f['writable'] else 'read-only':<10} "
            f"{f['host_path']}"
            for f in folders
        ]
        out.emit(folders, "\n".join(lines) or "no folders")
        return OK
    answer = _open(api, "GET", _url(api, args.path, folder=True))
    if not _is_json(answer):  # a file: its bytes are not read, only its size
        size = int(answer.headers.get("Content-Length") or 0)
        answer.close()
        entry = {"name": args.path.rstrip("/").rsplit("/", 1)[-1], "type": "file", "size": size}
        out.emit([entry], f"{entry['name']}  {_size(size)}")
        return OK
    listing = _json(answer)
    entries = listing.get("entries", listing.get("folders", []))
    lines = []
    for e in entries:
        if "type" not in e:  # an area's folders (`files ls projects`)
            lines.append(f"{e['path']}/")
            continue
        name = e["name"] + ("/" if e["type"] == "folder" else "")
        kind = "" if e["type"] in ("file", "folder") else f"  ({e['type']})"
        lines.append(f"{_size(e['size']) if e['type'] == 'file' else '':>10}  {name}{kind}")
    out.emit(entries, "\n".join(lines) or "(empty)")
    return OK


def _copy(answer, target: IO[bytes]) -> int:
    written = 0
    while chunk := answer.read(CHUNK):
        target.write(chunk)
        written += len(chunk)
    return written


def cmd_get(args, out) -> int:
    api = client(args)
    name = args.path.rstrip("/").rsplit("/", 1)[-1]
    answer = _open(api, "GET", _url(api, args.path))
    if _is_json(answer):
        answer.close()
        raise CliError(f"{args.path} is a folder: `switchyard files ls {args.path}`", BAD_INPUT)
    with answer:
        if args.local == "-":
            written = _copy(answer, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            return OK
        local = Path(args.local or name)
        if local.is_dir():
            local = local / name
        if local.exists() and not args.force:
            raise CliError(f"{local} exists: say --force to replace it", BAD_INPUT)
        # Into a new file beside it, moved into place once all of it arrived.
        fd, temp = tempfile.mkstemp(dir=local.parent, prefix=f".{local.name}.")
        try:
            with os.fdopen(fd, "wb") as target:
                written = _copy(answer, target)
            os.replace(temp, local)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
    out.emit({"path": args.path, "local": str(local), "size": written}, f"{local}: {written} bytes")
    return OK


def cmd_put(args, out) -> int:
    api = client(args)
    local = Path(args.local)
    if not local.is_file():
        raise CliError(f"{local} is not a file", BAD_INPUT)
    remote = args.path
    if remote.endswith("/"):
        remote = f"{remote.rstrip('/')}/{local.name}"  # into that folder, under its own name
    size = local.stat().st_size
    with open(local, "rb") as body:
        headers = {
            "Content-Length": str(size),
            "Content-Type": "application/octet-stream",
        }
        entry = _json(_open(api, "PUT", _url(api, remote), data=body, headers=headers))
    out.emit({**entry, "path": remote}, f"uploaded {local} to {remote} ({size} bytes)")
    return OK


def cmd_rm(args, out) -> int:
    api = client(args)
    _open(api, "DELETE", _url(api, args.path)).close()
    out.emit({"path": args.path, "removed": True}, f"removed {args.path}")
    return OK


def cmd_mkdir(args, out) -> int:
    api = client(args)
    parent, _, name = args.path.strip("/").rpartition("/")
    if not parent or not name:
        raise CliError("say the folder to make: <area>/<owner>/<path>", BAD_INPUT)
    body = json.dumps({"mkdir": name}).encode()
    headers = {"Content-Type": "application/json"}
    entry = _json(_open(api, "POST", _url(api, parent, folder=True), data=body, headers=headers))
    out.emit({**entry, "path": args.path}, f"made {args.path.strip('/')}/")
    return OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    files = sub.add_parser(
        "files",
        help="your storage folders: ls, get, put, rm, mkdir",
        description="Paths as on the Files page: <area>/<owner>/<path>, "
        "e.g. projects/materials/tasks/42/model.pt",
    )
    verbs = files.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("ls", help="the folders you may open, or what one holds")
    p.add_argument("path", nargs="?", default="")
    p.set_defaults(run=cmd_ls)
    p = verbs.add_parser("get", help="download a file")
    p.add_argument("path")
    p.add_argument("local", nargs="?", help="where (default: its name here; - for stdout)")
    p.add_argument("-f", "--force", action="store_true", help="replace a local file")
    p.set_defaults(run=cmd_get)
    p = verbs.add_parser("put", help="upload a file (replacing one of that name)")
    p.add_argument("local")
    p.add_argument("path", help="the file, or a folder ending in / to keep its name")
    p.set_defaults(run=cmd_put)
    p = verbs.add_parser("rm", help="remove a file or an empty folder")
    p.add_argument("path")
    p.set_defaults(run=cmd_rm)
    p = verbs.add_parser("mkdir", help="make a folder")
    p.add_argument("path")
    p.set_defaults(run=cmd_mkdir)
