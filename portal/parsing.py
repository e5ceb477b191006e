"""Reading what a request sends: ids in URLs, JSON objects and their text fields, times, and
descriptors (JSON, YAML or a multipart upload, within their size limits).

Every page and API of every app reads its input through these, so one kind of bad input gets
one answer wherever it is sent.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.request import Request

from portal.errors import ApplicationError
from scheduling.descriptor import parse_duration

# Ids the database can hold (a bigint): a larger number in a URL is a 404, not a 500.
_MAX_ID = 2**63 - 1


def checked_pk(pk: int | str) -> int:
    value = int(pk)
    if not 0 < value <= _MAX_ID:
        raise ValueError(pk)
    return value


def json_object(request: Request) -> dict:
    """The request's JSON body, which must be an object."""
    if not isinstance(request.data, dict):
        raise ApplicationError("send a JSON object", field=None)
    return request.data


def text(data: dict, name: str, *, required: bool = True) -> str:
    """A text field: required and not empty, or (`required=False`) "" when absent."""
    value = data.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ApplicationError("required: text", field=name, got=value)
    return value


def text_or_none(data: dict, name: str) -> str | None:
    """A text field that may be absent (None)."""
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApplicationError("must be text", field=name, got=value)
    return value


def parse_until(raw: object) -> datetime:
    """An ISO 8601 time (UTC if it names no zone), or a duration from now (`4h`, `2d`)."""
    if not isinstance(raw, str) or not raw.strip():
        raise ApplicationError("required: a time (ISO 8601) or a duration (4h)", field="until")
    try:
        return timezone.now() + timedelta(seconds=parse_duration(raw.strip()))
    except ValueError:
        pass  # not a duration: a time, then
    when = None
    with contextlib.suppress(ValueError):  # a well-formed but impossible time: refused below
        when = parse_datetime(raw.strip())
    if when is None:
        raise ApplicationError(
            "must be a time (2026-12-03T18:00Z) or a duration (4h)", field="until", got=raw[:80]
        )
    return when if when.tzinfo else when.replace(tzinfo=UTC)


JSON_TYPES = {"application/json"}
YAML_TYPES = {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}
# Room for the multipart framing around a descriptor file or field.
_MULTIPART_SLACK = 64 * 1024


def media_type(request: Request) -> str:
    return (request.content_type or "").split(";")[0].strip().lower()


def _declared_length(request) -> int:
    try:
        return max(0, int(request.META.get("CONTENT_LENGTH") or 0))
    except ValueError:
        return 0


class RawBody(BaseParser):
    """A JSON or YAML body as bytes: the descriptor module parses it, with its own limits.

    Being a parser (not a raw read in the view) is what lets a browser session send JSON or
    YAML: DRF's CSRF check reads `request.POST`, which parses the body first. The limit is
    the view's `body_limit` setting; a body declared larger is refused before it is read,
    and one sent without a length is read one byte past the limit, so that the descriptor's
    own size check still refuses it instead of it being cut silently.
    """

    def parse(self, stream, media_type=None, parser_context=None) -> bytes:  # type: ignore[override]  # DRF takes any parsed value; this keeps the body
        view = (parser_context or {}).get("view")
        limit = getattr(settings, getattr(view, "body_limit", "SWITCHYARD_DESCRIPTOR_MAX_BYTES"))
        what = getattr(view, "body_what", "descriptor")
        request = (parser_context or {}).get("request")
        length = _declared_length(request) if request is not None else 0
        if length > limit:
            raise ApplicationError(
                f"the {what} is {length} bytes; the limit is {limit}", got=length
            )
        return stream.read(limit + 1) if stream is not None else b""


def _raw_parser(media: str) -> type[RawBody]:
    name = "Raw" + "".join(part.title() for part in media.replace("/", "-").split("-"))
    return type(name, (RawBody,), {"media_type": media})


JSON_PARSERS = [_raw_parser(media) for media in sorted(JSON_TYPES)]
DESCRIPTOR_PARSERS: list[type[BaseParser]] = [
    MultiPartParser,
    *JSON_PARSERS,
    *(_raw_parser(m) for m in sorted(YAML_TYPES)),
]


def raw_body(request: Request) -> bytes:
    data = request.data
    return data if isinstance(data, bytes) else b""


def read_descriptor(request: Request) -> tuple[bytes, str | None]:
    """The descriptor's bytes and format from a JSON, YAML or multipart request."""
    limit = settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES
    content_type = media_type(request)
    if content_type == "multipart/form-data":
        length = _declared_length(request)
        if length > limit + _MULTIPART_SLACK:
            raise ApplicationError(
                f"the request is {length} bytes; a descriptor may be at most {limit}",
                field="descriptor",
                got=length,
            )
        upload = request.FILES.get("descriptor")
        if upload is None:
            text = request.POST.get("descriptor")
            if text is None:
                raise ApplicationError(
                    "send the descriptor as the multipart field 'descriptor'", field="descriptor"
                )
            return text.encode("utf-8"), None
        if upload.size > limit:
            raise ApplicationError(
                f"the descriptor is {upload.size} bytes; the limit is {limit}",
                field="descriptor",
                got=upload.size,
            )
        name = (upload.name or "").lower()
        fmt = (
            "json"
            if name.endswith(".json")
            else "yaml"
            if name.endswith((".yaml", ".yml"))
            else None
        )
        return upload.read(), fmt
    if content_type in JSON_TYPES or content_type in YAML_TYPES:
        return raw_body(request), "json" if content_type in JSON_TYPES else "yaml"
    raise ApplicationError(
        "send the descriptor as application/json, application/yaml, or multipart field "
        "'descriptor'",
        field=None,
        got=content_type or None,
        status=415,
    )


def descriptor_request(upload_name: str) -> dict:
    """The three ways a descriptor arrives, for the OpenAPI schema."""
    return {
        "application/json": OpenApiTypes.OBJECT,
        "application/yaml": OpenApiTypes.STR,
        "multipart/form-data": inline_serializer(
            upload_name, {"descriptor": serializers.FileField()}
        ),
    }
