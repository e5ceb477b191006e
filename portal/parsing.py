"""Reading what a request sends: ids in URLs, JSON objects and their text fields, times.

Every page and API of every app reads its input through these, so one kind of bad input gets
one answer wherever it is sent.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime
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
