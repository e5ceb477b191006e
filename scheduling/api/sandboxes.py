"""REST API v1 for live sandboxes (docs/sandboxes.md). Thin: read the request, call the
sandbox service, answer.

`POST /api/v1/sandboxes/` creates one (201 ready; 202 starting or queued; 409 refused),
`GET` lists those of the user's projects; `GET/DELETE /api/v1/sandboxes/<id>/`;
`POST .../exec/` runs a command (`?stream=1`: newline-delimited JSON as it runs);
`PUT/GET .../files/<path>` writes and reads a file inside it. A sandbox outside the user's
projects is a 404. A batch task's scoped token (`Token sytask.…`) reaches these URLs only,
for its own project's sandboxes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

from django.contrib.auth.models import User
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from portal.errors import ApplicationError
from portal.parsing import JSON_PARSERS
from scheduling.selectors.sandboxes import (
    sandbox_get_for_user,
    sandbox_list_for_user,
)
from scheduling.services.sandboxes import (
    TASK_TOKEN_PREFIX,
    TaskScope,
    exec_ask,
    sandbox_create,
    sandbox_delete,
    sandbox_exec,
    sandbox_exec_stream,
    sandbox_get_file,
    sandbox_put_file,
    sandbox_refresh,
    sandbox_summary,
    task_token_scope,
)

LIST_LIMIT = 200


class TaskTokenAuthentication(BaseAuthentication):
    """`Authorization: Token sytask.…`: a batch task's scoped token (docs/sandboxes.md).
    Any other header is left to the site's own authentication."""

    def authenticate(self, request: Request):
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() != b"token":
            return None
        text = parts[1].decode("ascii", "replace")
        if not text.startswith(TASK_TOKEN_PREFIX):
            return None
        found = task_token_scope(text)
        if found is None:
            raise AuthenticationFailed("the task's token has expired, or its task has ended")
        return found

    def authenticate_header(self, request: Request) -> str:
        return "Token"


class TaskTokenScheme(OpenApiAuthenticationExtension):
    """The API schema names it: `Authorization: Token sytask.…`, a batch task's own."""

    target_class = TaskTokenAuthentication
    name = "taskToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A batch task's scoped token, `Token sytask.…` (SWITCHYARD_TOKEN in "
            "its environment): its own project's sandboxes only (docs/sandboxes.md).",
        }


class _Sandboxes(APIView):
    authentication_classes = [
        TaskTokenAuthentication,
        *cast(list[type[BaseAuthentication]], api_settings.DEFAULT_AUTHENTICATION_CLASSES),
    ]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "sandbox"
    parser_classes: list[type[BaseParser]] = list(JSON_PARSERS)
    body_limit, body_what = "SWITCHYARD_BODY_MAX_BYTES", "request"

    def user(self) -> User:
        return cast(User, self.request.user)

    def scope(self) -> TaskScope | None:
        auth = self.request.auth
        return auth if isinstance(auth, TaskScope) else None

    def sandbox(self, sid: str, *, activity: bool = True):
        return sandbox_get_for_user(self.user(), sid, scope=self.scope(), activity=activity)

    def body(self) -> Any:
        raw = self.request.data
        if not isinstance(raw, bytes) or not raw:
            raise ApplicationError("expected a JSON object", field=None, got="")
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ApplicationError(f"not JSON: {exc}", field=None) from None
        # JSON may escape half of a surrogate pair alone ("\ud800"): text no command, file
        # name or database column can hold. Only a body with such an escape is looked at.
        if b"\\ud" in raw.lower():
            try:
                json.dumps(data, ensure_ascii=False).encode()
            except UnicodeEncodeError:
                raise ApplicationError(
                    "not valid Unicode: an unpaired surrogate (\\ud800-\\udfff alone)",
                    field=None,
                ) from None
        return data


class SandboxListCreate(_Sandboxes):
    def get_throttles(self):
        if self.request.method == "POST":
            self.throttle_scope = "sandbox-create"
        return super().get_throttles()

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, description="live (default) or all"),
            OpenApiParameter("project", str, description="one project's"),
        ],
        responses={200: OpenApiTypes.OBJECT},
        operation_id="sandboxes_list",
        description="The sandboxes of your projects, newest first (at most 200).",
    )
    def get(self, request: Request) -> Response:
        which = request.query_params.get("state", "live")
        if which not in ("live", "all"):
            raise ApplicationError("expected live or all", field="state", got=which[:80])
        rows = sandbox_list_for_user(self.user(), scope=self.scope())
        if which == "live":
            rows = rows.filter(state__in=["starting", "ready", "queued"])
        project = request.query_params.get("project")
        if project is not None:
            rows = rows.filter(project__slug=project[:63])
        return Response({"results": [sandbox_summary(s) for s in rows[:LIST_LIMIT]]})

    @extend_schema(
        request={"application/json": OpenApiTypes.OBJECT},
        responses={201: OpenApiTypes.OBJECT, 202: OpenApiTypes.OBJECT},
        description='Create a sandbox: {"project", "template" (or "image"), "cpus", '
        '"memory_mb", "idle_timeout_s", "max_lifetime_s", "network": {"allow": '
        '["host:port"]}}. 201 ready; 202 starting or queued (poll it); 409 refused.',
    )
    def post(self, request: Request) -> Response:
        created = sandbox_create(user=self.user(), data=self.body(), scope=self.scope())
        return Response(sandbox_summary(created.sandbox), status=created.status)


class SandboxDetail(_Sandboxes):
    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, sid: str) -> Response:
        return Response(sandbox_summary(sandbox_refresh(self.sandbox(sid))))

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, description="End it now.")
    def delete(self, request: Request, sid: str) -> Response:
        sandbox = sandbox_delete(user=self.user(), sandbox=self.sandbox(sid))
        return Response(sandbox_summary(sandbox))


class SandboxExec(_Sandboxes):
    @extend_schema(
        parameters=[OpenApiParameter("stream", str, description="1: NDJSON as it runs")],
        request={"application/json": OpenApiTypes.OBJECT},
        responses={200: OpenApiTypes.OBJECT},
        description='Run {"command": [argv], "stdin" or "stdin_b64", "env", "cwd", "timeout", '
        '"binary"} → {"stdout", "stderr", "exit_code", "duration_ms", "timed_out", '
        '"truncated"} (binary: "stdout_b64", "stderr_b64").',
    )
    def post(self, request: Request, sid: str):
        ask = exec_ask(self.body())
        stream = request.query_params.get("stream", "")
        if stream not in ("", "0", "1"):
            raise ApplicationError("expected 0 or 1", field="stream", got=stream[:80])
        sandbox = self.sandbox(sid, activity=False)
        if stream == "1":
            events = sandbox_exec_stream(user=self.user(), sandbox=sandbox, ask=ask)
            answer = StreamingHttpResponse(_ndjson(events), content_type="application/x-ndjson")
            # The front (docker/nginx/) passes each chunk on as it comes, not once it has a
            # buffer's worth: the point of a stream.
            answer["X-Accel-Buffering"] = "no"
            return answer
        return Response(sandbox_exec(user=self.user(), sandbox=sandbox, ask=ask))


class _ndjson:
    """The events as lines; closing it (Django does, once the answer is done or the client
    has gone) closes them, so the exec's call slot goes back even if no line was sent."""

    def __init__(self, events: Iterator[dict[str, Any]]) -> None:
        self._events = events

    def __iter__(self) -> Iterator[bytes]:
        return (json.dumps(event).encode() + b"\n" for event in self._events)

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()


class _Body(BaseParser):
    """Leaves a file's body to the view (any type: it is bytes)."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return None


class SandboxFile(_Sandboxes):
    parser_classes = [_Body]

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request: Request, sid: str, path: str) -> HttpResponse:
        sandbox = self.sandbox(sid, activity=False)
        data = sandbox_get_file(user=self.user(), sandbox=sandbox, path=path)
        return HttpResponse(data, content_type="application/octet-stream")

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={200: OpenApiTypes.OBJECT},
        description="Write the body to the file (relative paths: in /home/sandbox).",
    )
    def put(self, request: Request, sid: str, path: str) -> Response:
        data = request._request.body
        sandbox = self.sandbox(sid, activity=False)
        written = sandbox_put_file(user=self.user(), sandbox=sandbox, path=path, data=data)
        return Response({"path": path, "bytes": written}, status=status.HTTP_200_OK)
