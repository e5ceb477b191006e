"""A task's `secret_env` at rest: encrypted, and shown to no one (docs/security.md).

Values are sealed with Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`) before
anything is stored, and opened only when a job is handed to its backend. The stored spec
keeps the names (pages and the API show them, with MASK for the value); the stored
descriptor has MASK where the values were.

Keys: `SWITCHYARD_SECRETS_KEY` (or `_FILE`), a comma-separated list of Fernet keys, the first
sealing and every one opening; without it, a key derived from Django's SECRET_KEY (and one
from each of SECRET_KEY_FALLBACKS, for opening). Rotating: put the new key first and keep
the old one after it until no task that still waits was sealed with it
(`manage.py reseal_secret_env` reseals every stored value with the first key at once).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from scheduling.descriptor.limits import SECRET_MASK as MASK

_INFO = b"switchyard secret_env v1"


class CannotOpen(Exception):
    """A sealed value that no configured key opens."""


def _derived(secret_key: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        secret_key.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def _box() -> MultiFernet:
    configured: str | list[str] = settings.SWITCHYARD_SECRETS_KEYS
    if isinstance(configured, str):  # as set: comma- or line-separated
        configured = [key.strip() for key in configured.replace("\n", ",").split(",")]
        configured = [key for key in configured if key]
    if configured:
        try:
            return MultiFernet([Fernet(key.encode()) for key in configured])
        except ValueError:
            raise ImproperlyConfigured(
                "SWITCHYARD_SECRETS_KEY: every key must be a Fernet key (32 bytes, url-safe "
                "base64: python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())')"
            ) from None
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())]
    return MultiFernet([_derived(key) for key in keys])


def seal(values: Iterable[tuple[str, str]]) -> dict[str, str]:
    """name → sealed value, for storing."""
    box = _box()
    return {name: box.encrypt(value.encode()).decode() for name, value in values}


def open_sealed(stored: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The (name, value) pairs back, for the job's environment. A value no configured key
    opens (the key was rotated away) is refused with what to do, never run without it."""
    box = _box()
    out = []
    for name, token in sorted((stored or {}).items()):
        try:
            out.append((name, box.decrypt(token.encode()).decode()))
        except InvalidToken:
            raise CannotOpen(
                f"secret_env.{name}: cannot be opened with the configured keys (was "
                "SWITCHYARD_SECRETS_KEY or SECRET_KEY rotated without keeping the old key?); "
                "submit the task again"
            ) from None
    return tuple(out)


def reseal(stored: Mapping[str, str]) -> dict[str, str]:
    """The same values sealed with the first key (for rotation)."""
    box = _box()
    return {name: box.rotate(token.encode()).decode() for name, token in stored.items()}


def masked(stored: Mapping[str, Any] | None) -> dict[str, str]:
    """What anyone is shown of a task's secret_env: its names."""
    return dict.fromkeys(sorted(stored or {}), MASK)


def stored_spec(spec_dict: dict[str, Any]) -> dict[str, Any]:
    """A TaskSpec.as_dict() as it may be stored: its secret_env sealed."""
    if spec_dict.get("secret_env"):
        spec_dict = {**spec_dict, "secret_env": seal(spec_dict["secret_env"].items())}
    return spec_dict


def shown_spec(spec_dict: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as the API and pages show it: secret values masked."""
    if spec_dict.get("secret_env"):
        spec_dict = {**spec_dict, "secret_env": masked(spec_dict["secret_env"])}
    return spec_dict


def mask_document(doc: Any) -> tuple[Any, bool]:
    """A parsed descriptor (a task, or a workflow's tasks) with every secret_env value
    replaced by MASK; and whether a value was replaced (one masked already is not)."""
    changed = False

    def one(body: Any) -> Any:
        nonlocal changed
        if isinstance(body, dict) and isinstance(body.get("secret_env"), dict):
            changed = changed or any(value != MASK for value in body["secret_env"].values())
            return {**body, "secret_env": dict.fromkeys(body["secret_env"], MASK)}
        return body

    doc = one(doc)
    if isinstance(doc, dict) and isinstance(doc.get("tasks"), list):
        doc = {**doc, "tasks": [one(task) for task in doc["tasks"]]}
    return doc, changed


def masked_descriptor(text: str, fmt: str) -> str:
    """A descriptor as it may be stored and shown: verbatim, unless it has secret_env values
    not masked yet, when it is written again (JSON or YAML as given; comments are lost) with
    the values masked."""
    if "secret_env" not in text:
        return text
    try:
        doc = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):  # parsed already; never store what was not masked
        return MASK
    doc, changed = mask_document(doc)
    if not changed:
        return text
    if fmt == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
