"""Strict environment reading for settings: a malformed value is an error, never a guess.

`NAME_FILE` is read in place of `NAME` when set (for secrets mounted as files).
"""

from __future__ import annotations

import ipaddress
import os
from typing import overload

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {path!r}: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = env_str(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}: expected one of 1/0/true/false/yes/no/on/off, got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = env_str(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected an integer, got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str) -> list:
    """Comma-separated addresses or CIDR networks (`10.0.0.5, 10.1.0.0/16, fd00::/8`), empty
    by default. A network with host bits set (`10.0.0.5/16`) is refused: it is a typo for
    either the address or the network, and which one decides who is trusted."""
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item, strict=True))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: expected IP addresses or networks (10.0.0.5, 10.0.0.0/24), "
                f"comma-separated, got {item!r}"
            ) from None
    return networks
