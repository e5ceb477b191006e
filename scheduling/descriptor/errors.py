"""The error shape: FieldError (field, message, got), DescriptorError, and the helpers that
make a got-value short and JSON-safe."""

from __future__ import annotations

import json
import math
import reprlib
from dataclasses import dataclass
from typing import Any

from scheduling.descriptor.limits import _GOT_CHARS

_repr = reprlib.Repr()
_repr.maxlevel = 2
_repr.maxstring = _GOT_CHARS
_repr.maxother = _GOT_CHARS
_repr.maxlist = _repr.maxdict = _repr.maxtuple = _repr.maxset = 8


def _short(text: str) -> str:
    return text if len(text) <= _GOT_CHARS else text[: _GOT_CHARS - 3] + "..."


def _jsonable(value: Any) -> Any:
    """`value` as something json.dumps takes and a client can show: scalars as they are
    (long strings cut), anything else (containers, dates, NaN, huge ints) as a short repr."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _short(value)
    if isinstance(value, int):
        # JavaScript clients lose precision past 2**53; such a number is an error anyway.
        return value if abs(value) < 2**53 else _short(str(value))
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return _short(_repr.repr(value))


@dataclass(frozen=True, slots=True)
class FieldError:
    field: str | None  # dotted path, e.g. "resources.gpus", "command[2]"; None: the document
    message: str
    got: Any = None

    def __post_init__(self) -> None:
        # Sanitised here, once, so every error is safe to serialise whoever built it.
        object.__setattr__(self, "got", _jsonable(self.got))

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "message": self.message, "got": self.got}

    def __str__(self) -> str:
        where = self.field or "descriptor"
        got = "" if self.got is None else f", got {json.dumps(self.got, ensure_ascii=False)}"
        return f"{where}: {self.message}{got}"


class DescriptorError(Exception):
    """The descriptor is refused; `errors` lists every problem found."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def _document_error(message: str, got: Any = None) -> DescriptorError:
    return DescriptorError([FieldError(None, message, got)])
