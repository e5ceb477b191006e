"""What every `switchyard` command shares: the exit codes, the config file holding the token,
the HTTP client of the portal's REST API and the output (docs/cli.md). cli.py and files.py
both build on it; it imports neither.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import stat
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

OK, TASK_FAILED, BAD_INPUT, AUTH, NOT_FOUND, CONFLICT, UNREACHABLE, TIMED_OUT = range(8)
TERMINAL = {"succeeded", "failed", "cancelled", "timeout", "skipped"}
_STATUS_EXIT = {
    400: BAD_INPUT,
    401: AUTH,
    403: AUTH,
    404: NOT_FOUND,
    409: CONFLICT,
    415: BAD_INPUT,
    429: UNREACHABLE,
}


class CliError(Exception):
    def __init__(
        self, message: str, code: int, errors: list[dict] | None = None, body: Any = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.errors = errors or []
        self.body = body  # the portal's answer, where it said more than its errors


def config_path() -> Path:
    if os.environ.get("SWITCHYARD_CONFIG"):
        return Path(os.environ["SWITCHYARD_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "switchyard" / "config.json"


def _check_private(path: Path, *, folder: bool) -> None:
    """Refuse a config folder or file that another account owns or may write (a file also
    one it may read): another user could plant a config that sends the password and token
    to their own server, or read or swap the token. Nothing is changed on the user's behalf:
    the error says what to run."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise CliError(f"cannot check {path}: {exc}", BAD_INPUT) from None
    what = "config folder" if folder else "config file"
    if info.st_uid != os.getuid():
        raise CliError(
            f"refusing the {what} {path}: it belongs to another account (uid {info.st_uid}); "
            "set SWITCHYARD_CONFIG to a file in a folder of your own, e.g. "
            "SWITCHYARD_CONFIG=~/.config/switchyard/config.json",
            BAD_INPUT,
        )
    others = 0o022 if folder else 0o077
    mode = stat.S_IMODE(info.st_mode)
    if mode & others:
        fix = "chmod 700" if folder else "chmod 600"
        raise CliError(
            f"refusing the {what} {path}: others may {'write to it' if folder else 'use it'} "
            f"(mode {mode:04o}); run: {fix} {shlex.quote(str(path))}",
            BAD_INPUT,
        )


def load_config() -> dict[str, Any]:
    path = config_path()
    _check_private(path.parent, folder=True)
    _check_private(path, folder=False)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}", AUTH) from None


def save_config(config: dict[str, Any]) -> Path:
    """Written 0600 from the first byte (never readable by others, not even briefly), into a
    new file of its own (no symlink or earlier file is followed), then moved into place, in
    a folder only its user may write (made 0700)."""
    path = config_path()
    if not path.parent.exists():
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.parent.mkdir(mode=0o700)
            path.parent.chmod(0o700)  # mkdir's mode is masked by the umask
    _check_private(path.parent, folder=True)
    _check_private(path, folder=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".switchyard-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(config, out, indent=2)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


class Client:
    def __init__(self, url: str, token: str | None) -> None:
        self.url = url.rstrip("/")
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str = "application/json",
        params: dict[str, Any] | None = None,
    ) -> Any:
        url = f"{self.url}/api/v1/{path.lstrip('/')}"
        if params:
            url += "?" + urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        request = urllib.request.Request(url, data=body, method=method)
        request.add_header("Accept", "application/json")
        if body is not None:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_unredirected_header("Authorization", f"Token {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            raise http_error(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            raise CliError(f"cannot reach {self.url}: {exc}", UNREACHABLE) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise CliError(
                f"{self.url} did not answer as a Switchyard portal (not JSON): check --url",
                UNREACHABLE,
            ) from None

    def json(self, method: str, path: str, data: Any = None, **kwargs) -> Any:
        body = json.dumps(data).encode() if data is not None else None
        return self.call(method, path, body=body, **kwargs)


def http_error(exc: urllib.error.HTTPError) -> CliError:
    try:
        body = json.loads(exc.read() or b"{}")
    except ValueError:
        body = {}
    errors = body.get("errors") if isinstance(body, dict) else None
    if not errors and isinstance(body, dict) and body.get("detail"):
        errors = [{"field": None, "message": body["detail"], "got": None}]
    message = errors[0]["message"] if errors else f"HTTP {exc.code}"
    if exc.code == 401:
        message += " (log in again: switchyard login)"
    code = _STATUS_EXIT.get(exc.code, UNREACHABLE if exc.code >= 500 else BAD_INPUT)
    return CliError(message, code, errors or [], body)


def client(args) -> Client:
    config = load_config()
    url = args.url or os.environ.get("SWITCHYARD_URL") or config.get("url")
    if not url:
        raise CliError("no portal: switchyard login --url http://portal.example:8000", AUTH)
    token = os.environ.get("SWITCHYARD_TOKEN") or config.get("token")
    if not token:
        raise CliError("not logged in: switchyard login", AUTH)
    return Client(url, token)


class Output:
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def emit(self, data: Any, text: str) -> None:
        if self.mode == "json":
            print(json.dumps(data, indent=2, default=str))
        else:
            print(text)
