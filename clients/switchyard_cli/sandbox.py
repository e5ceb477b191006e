"""Live sandboxes from Python (docs/sandboxes.md, "Python client"): standard library only.

    from switchyard_cli.sandbox import Sandbox

    with Sandbox.create(project="materials") as box:
        box.write("hello.py", b"print('hi')")
        done = box.exec(["python3", "hello.py"])
        print(done.stdout, done.exit_code, done.duration_ms)
        for stream, text in box.exec_stream(["python3", "-u", "long.py"]):
            print(stream, text, end="")
        data = box.read("out.csv")
    # deleted here (its usage ends with it)

The portal and token: given, else SWITCHYARD_URL and SWITCHYARD_TOKEN (what a batch task
with `sandboxes: true` has), else the `switchyard login` config. Errors raise CliError
(`.code` as the CLI's exit codes, `.errors` the portal's [{field, message, got}]).
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from switchyard_cli.client import (
    AUTH,
    TIMED_OUT,
    UNREACHABLE,
    CliError,
    http_error,
    load_config,
)

LIVE = ("starting", "queued")


@dataclass(frozen=True)
class ExecResult:
    stdout: bytes
    stderr: bytes
    exit_code: int | None  # None: killed at its timeout (timed_out) or by the sandbox's end
    duration_ms: float
    timed_out: bool = False
    truncated: bool = False

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


class Api:
    """The sandbox API over urllib: JSON in and out, or raw bytes for files."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        config: dict[str, Any] = {}
        if not (url or os.environ.get("SWITCHYARD_URL")) or not (
            token or os.environ.get("SWITCHYARD_TOKEN")
        ):
            config = load_config()
        self.url = (url or os.environ.get("SWITCHYARD_URL") or config.get("url") or "").rstrip("/")
        self.token = token or os.environ.get("SWITCHYARD_TOKEN") or config.get("token")
        if not self.url or not self.token:
            raise CliError("no portal or token: switchyard login, or SWITCHYARD_URL/TOKEN", AUTH)

    def open(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        kind: str = "",
        params: dict[str, str] | None = None,
        timeout: float = 120,
    ):
        url = f"{self.url}/api/v1/sandboxes/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        request = urllib.request.Request(url, data=body, method=method)
        request.add_unredirected_header("Authorization", f"Token {self.token}")
        request.add_header("Accept", "application/json")
        if body is not None:
            request.add_header("Content-Type", kind or "application/json")
        for attempt in range(BUSY_TRIES):
            try:
                return urllib.request.urlopen(request, timeout=timeout)
            except urllib.error.HTTPError as exc:
                # Too many at once (the portal did nothing with it): again, after the wait
                # it asks for.
                if exc.code != 429 or attempt == BUSY_TRIES - 1:
                    raise http_error(exc) from None
                time.sleep(_retry_after(exc.headers.get("Retry-After")))
            except (urllib.error.URLError, OSError) as exc:
                raise CliError(f"cannot reach {self.url}: {exc}", UNREACHABLE) from None
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, data: Any = None, **kwargs: Any) -> Any:
        body = json.dumps(data).encode() if data is not None else None
        with self.open(method, path, body=body, **kwargs) as answer:
            raw = answer.read()
        return json.loads(raw) if raw else None


class Sandbox:
    """One live sandbox: `Sandbox.create(...)` or `Sandbox.attach(id)`."""

    def __init__(self, api: Api, data: dict[str, Any]) -> None:
        self.api = api
        self.data = data

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def state(self) -> str:
        return self.data["state"]

    @classmethod
    def create(
        cls,
        project: str,
        *,
        template: str = "",
        cpus: int | None = None,
        memory_mb: int | None = None,
        idle_timeout_s: int | None = None,
        max_lifetime_s: int | None = None,
        allow: list[str] | tuple[str, ...] = (),
        wait_s: float = 60,
        url: str | None = None,
        token: str | None = None,
    ) -> Sandbox:
        """A new sandbox, ready: one `starting` or `queued` is waited for up to `wait_s`
        (0: returned as it is)."""
        api = Api(url, token)
        body: dict[str, Any] = {"project": project, "template": template}
        for name, value in (
            ("cpus", cpus),
            ("memory_mb", memory_mb),
            ("idle_timeout_s", idle_timeout_s),
            ("max_lifetime_s", max_lifetime_s),
        ):
            if value is not None:
                body[name] = value
        if allow:
            body["network"] = {"allow": list(allow)}
        box = cls(api, api.json("POST", "", body))
        if wait_s > 0:
            box.wait_ready(wait_s)
        return box

    @classmethod
    def attach(cls, sandbox_id: str, *, url: str | None = None, token: str | None = None):
        api = Api(url, token)
        return cls(api, api.json("GET", f"{_quote(sandbox_id)}/"))

    @classmethod
    def ls(
        cls, *, everything: bool = False, url: str | None = None, token: str | None = None
    ) -> list[Sandbox]:
        api = Api(url, token)
        found = api.json("GET", "", params={"state": "all" if everything else "live"})
        return [cls(api, row) for row in found["results"]]

    def refresh(self) -> Sandbox:
        self.data = self.api.json("GET", f"{_quote(self.id)}/")
        return self

    def wait_ready(self, timeout_s: float) -> Sandbox:
        deadline = time.monotonic() + timeout_s
        pause = 0.05
        while self.state in LIVE:
            if time.monotonic() > deadline:
                raise CliError(f"sandbox {self.id} is still {self.state}", TIMED_OUT)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            self.refresh()
        if self.state != "ready":
            raise CliError(
                f"sandbox {self.id} is {self.state}: {self.data.get('end_reason')}", UNREACHABLE
            )
        return self

    def exec(
        self,
        argv: list[str],
        *,
        stdin: bytes | str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60,
    ) -> ExecResult:
        """Run `argv` (no shell: wrap in ["sh", "-c", …] for one) and wait for its end."""
        body = _exec_body(argv, stdin, env, cwd, timeout)
        answer = self.api.json("POST", f"{_quote(self.id)}/exec/", body, timeout=timeout + 30)
        return ExecResult(
            stdout=base64.b64decode(answer["stdout_b64"]),
            stderr=base64.b64decode(answer["stderr_b64"]),
            exit_code=answer["exit_code"],
            duration_ms=answer["duration_ms"],
            timed_out=answer.get("timed_out", False),
            truncated=answer.get("truncated", False),
        )

    def exec_stream(
        self,
        argv: list[str],
        *,
        stdin: bytes | str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60,
    ) -> Iterator[tuple[str, bytes | dict]]:
        """("stdout" | "stderr", bytes) as the output arrives, then ("result", {exit_code,
        duration_ms, timed_out, truncated})."""
        body = json.dumps(_exec_body(argv, stdin, env, cwd, timeout)).encode()
        path = f"{_quote(self.id)}/exec/"
        with self.api.open(
            "POST", path, body=body, params={"stream": "1"}, timeout=timeout + 30
        ) as answer:
            for line in answer:
                event = json.loads(line)
                if "stream" in event:
                    yield event["stream"], base64.b64decode(event["data_b64"])
                elif "error" in event:
                    raise CliError(event["error"], UNREACHABLE)
                else:
                    yield "result", event

    def write(self, path: str, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        with self.api.open(
            "PUT",
            f"{_quote(self.id)}/files/{_quote(path)}",
            body=raw,
            kind="application/octet-stream",
        ):
            pass

    def read(self, path: str) -> bytes:
        with self.api.open("GET", f"{_quote(self.id)}/files/{_quote(path)}") as answer:
            return answer.read()

    def delete(self) -> None:
        self.data = self.api.json("DELETE", f"{_quote(self.id)}/")

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()


def _exec_body(argv, stdin, env, cwd, timeout) -> dict[str, Any]:
    body: dict[str, Any] = {"command": list(argv), "timeout": timeout, "binary": True}
    if stdin is not None:
        raw = stdin.encode() if isinstance(stdin, str) else stdin
        body["stdin_b64"] = base64.b64encode(raw).decode()
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    return body


BUSY_TRIES = 5
BUSY_WAIT_MAX_S = 5.0


def _retry_after(value: str | None) -> float:
    """Seconds to wait as a 429's Retry-After says (1 when it says nothing of use), at most
    BUSY_WAIT_MAX_S."""
    try:
        return min(max(float(value or 1), 0.0), BUSY_WAIT_MAX_S)
    except ValueError:
        return 1.0


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="/")
