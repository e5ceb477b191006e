"""The one error type services raise; views turn it into a form error or the API's error shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ErrorItem:
    field: str | None
    message: str
    got: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "message": self.message, "got": self.got}


def prefixed(prefix: str, field: str | None) -> str | None:
    """A field inside a larger request: `tasks[2]` + `resources.gpus` →
    `tasks[2].resources.gpus`."""
    if not prefix:
        return field
    return f"{prefix}.{field}" if field else prefix


class ApplicationError(Exception):
    """A request the portal refuses, with the field at fault and what it got.

    `status` is the HTTP status the API answers with: 400 for bad input, 409 for a request
    that conflicts with the object's state, 503 when a backend cannot be reached.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        got: Any = None,
        status: int = 400,
        errors: list[ErrorItem] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors or [ErrorItem(field=field, message=message, got=got)]

    def as_payload(self) -> dict[str, Any]:
        return {"errors": [e.as_dict() for e in self.errors]}
