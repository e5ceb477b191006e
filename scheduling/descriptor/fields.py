"""Stage 2 building blocks shared by tasks and workflows: adding errors, the header and
unknown-field checks, and the scalar fields (names, choices, integers, durations, sizes)."""

from __future__ import annotations

import difflib
import re
from typing import Any

from scheduling.descriptor.errors import FieldError, _short
from scheduling.descriptor.limits import (
    _ALLOWED_SETS,
    _DURATION_RE,
    _DURATION_RULE,
    _ENDPOINTS,
    _MAX_DURATION_S,
    _MAX_MEMORY_MIB,
    _SIZE_RE,
    _SIZE_RULE,
    _SIZE_UNITS,
    API_VERSION,
)


def _add(errors: list[FieldError], field: str | None, message: str, got: Any = None) -> None:
    errors.append(FieldError(field, message, got))


def _path(prefix: str, key: Any) -> str:
    return f"{prefix}{_short(key if isinstance(key, str) else str(key))}"


def _check_version(data: dict, errors: list[FieldError]) -> None:
    version = data.get("apiVersion")
    if version is None:
        _add(errors, "apiVersion", f'is required; must be "{API_VERSION}"')
    elif version != API_VERSION:
        _add(errors, "apiVersion", f'must be "{API_VERSION}"', version)


def _check_header(data: dict, errors: list[FieldError], expected: str) -> bool:
    """Check apiVersion and kind; False when the document is some other kind than `expected`."""
    _check_version(data, errors)
    kind = data.get("kind")
    if kind is None:
        _add(errors, "kind", f'is required; must be "{expected}"')
        return True
    if kind == expected:
        return True
    if isinstance(kind, str) and kind in _ENDPOINTS:
        what, endpoint = _ENDPOINTS[kind]
        _add(
            errors,
            "kind",
            f'"{kind}" is not supported here: this endpoint takes kind: {expected}; '
            f"send {what} to {endpoint}",
            kind,
        )
    else:
        _add(errors, "kind", f'must be "{expected}"', kind)
    return False


def _check_unknown(
    data: dict, allowed: tuple[str, ...], prefix: str, errors: list[FieldError]
) -> None:
    if data.keys() <= _ALLOWED_SETS[allowed]:  # the usual case, checked in C
        return
    for key, value in data.items():
        if key in allowed:
            continue
        hint = ""
        if isinstance(key, str):
            lowered = {a.lower(): a for a in allowed}
            close = difflib.get_close_matches(key.lower(), lowered, n=1, cutoff=0.6)
            hint = f" (did you mean {lowered[close[0]]}?)" if close else ""
        _add(
            errors,
            _path(prefix, key),
            f"unknown field{hint}; expected one of {', '.join(allowed)}",
            value,
        )


# scalars ------------------------------------------------------------------------------------
def _required(
    value: Any, field: str, regex: re.Pattern, max_len: int, rule: str, errors: list[FieldError]
) -> Any:
    if value is None:
        _add(errors, field, f"is required; {rule}")
        return None
    return _optional_match(value, field, regex, max_len, rule, errors)


def _optional_match(
    value: Any, field: str, regex: re.Pattern, max_len: int, rule: str, errors: list[FieldError]
) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= max_len and regex.fullmatch(value):
        return value
    too_long = isinstance(value, str) and len(value) > max_len
    _add(errors, field, f"must be at most {max_len} characters" if too_long else rule, value)
    return None


def _optional_choice(
    value: Any, field: str, choices: tuple[str, ...], default: str | None, errors: list[FieldError]
) -> Any:
    if value is None:
        return default
    if isinstance(value, str) and value in choices:
        return value
    _add(errors, field, f"must be one of {', '.join(choices)}", value)
    return default


def _int_hint(value: Any) -> str:
    """A nudge for the commonest near-miss: a number written as text."""
    digits = value.lstrip("+-") if isinstance(value, str) else ""
    if not (digits.isascii() and digits.isdigit()):
        return ""
    return " (without leading zeros)" if len(digits) > 1 and digits[0] == "0" else " (not quoted)"


def _int(value: Any, field: str, lo: int, hi: int, errors: list[FieldError]) -> int | None:
    # `type(...) is int`: bool is a subclass of int, and `cpus: true` must not mean 1.
    if type(value) is not int or value < lo:
        _add(errors, field, f"must be an integer >= {lo}{_int_hint(value)}", value)
        return None
    if value > hi:
        _add(errors, field, f"must be an integer <= {hi}", value)
        return None
    return value


def _optional_int(
    value: Any, field: str, lo: int, hi: int, default: int | None, errors: list[FieldError]
) -> int | None:
    return default if value is None else _int(value, field, lo, hi, errors)


def parse_duration(value: Any) -> int:
    """Seconds in `value`: an integer (seconds) or text like 90s, 30m, 48h, 1h30m, 1d12h, 2d.

    Raises ValueError, with a message that says what is expected, for anything else, for
    zero or negative durations, and for more than 365 days.
    """
    if type(value) is int:
        seconds = value
    elif isinstance(value, str):
        if not value:
            raise ValueError(f"must not be empty; {_DURATION_RULE}")
        if value[0] == "-":
            raise ValueError("must be longer than 0 seconds")
        # The length guard keeps int() away from thousands of digits; no valid duration is long.
        match = _DURATION_RE.fullmatch(value) if len(value) <= 40 else None
        if match is None:
            raise ValueError(_DURATION_RULE)
        plain, days, hours, minutes, secs = match.groups()
        if plain is not None:
            seconds = int(plain)
        else:
            seconds = (
                int(days or 0) * 86400
                + int(hours or 0) * 3600
                + int(minutes or 0) * 60
                + int(secs or 0)
            )
    else:
        raise ValueError(_DURATION_RULE)
    if seconds <= 0:
        raise ValueError("must be longer than 0 seconds")
    if seconds > _MAX_DURATION_S:
        raise ValueError(f"must be at most 365d ({_MAX_DURATION_S} seconds)")
    return seconds


def parse_size(value: Any) -> int:
    """MiB in `value`: an integer (MiB) or text like 512Gi, 64G, 1024Mi, 1Ti, 500K.

    Binary units Ki, Mi, Gi, Ti are powers of 1024; decimal units K, M, G, T are powers of
    1000 (64G = 64 * 10**9 bytes = 61036 MiB, rounded up). Raises ValueError for anything
    else, for 0, and for more than 64 TiB.
    """
    if type(value) is int:
        mib = value
    elif isinstance(value, str):
        match = _SIZE_RE.fullmatch(value) if len(value) <= 24 else None
        if match is None:
            raise ValueError(_SIZE_RULE)
        size_bytes = int(match["n"]) * _SIZE_UNITS[match["unit"]]
        mib = -(-size_bytes // 2**20)  # round up: never give a task less than it asked for
    else:
        raise ValueError(_SIZE_RULE)
    if mib <= 0:
        raise ValueError("must be greater than 0")
    if mib > _MAX_MEMORY_MIB:
        raise ValueError(f"must be at most 64Ti ({_MAX_MEMORY_MIB} MiB)")
    return mib


def _optional_duration(value: Any, field: str, errors: list[FieldError]) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        _add(errors, field, str(exc), value)
        return None
