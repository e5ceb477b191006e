"""A live sandbox's egress audit (docs/sandbox-network.md): what its proxy was asked for and
what it did. While the sandbox runs it is read from its backend on demand (the proxy's log,
`Backend.egress_audit`); when it ends the records are kept in the database (`SandboxEgress`),
read once, because the log lives in the job's folder and retention removes that folder.

Both reads are bounded: at most READ_BYTES of the log's end, and of its records the newest
KEPT. On a cluster the log is written in a folder the session's account may write, so each
record is treated as hostile text: cut to its column, a time that is not one dropped.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from scheduling.backends.base import BackendError
from scheduling.backends.session.proxylog import ALLOWED
from scheduling.engine.registry import get_backend
from scheduling.models import Sandbox, SandboxEgress

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20
KEPT = 1000


def egress_requests(sandbox: Sandbox, *, limit: int = KEPT) -> list[dict[str, Any]]:
    """The sandbox's requests, newest first, at most `limit`: from its backend while it is
    live (the kept ones if the backend cannot say or has none), else as kept when it ended."""
    task = sandbox.task
    if sandbox.live and sandbox.egress and task.backend_id:
        try:
            records = get_backend(task.backend).egress_audit(
                task.backend_id, limit_bytes=READ_BYTES
            )
        except (BackendError, OSError, ValueError):
            log.warning("sandbox %s: its egress audit could not be read", sandbox.public_id)
        else:
            # None (its folder gone with a row not yet ended): what was kept, if anything.
            if records:
                return [_as_shown(row) for row in reversed(_rows(sandbox, records)[-limit:])]
    return [
        _as_shown(row)
        for row in SandboxEgress.objects.filter(sandbox=sandbox).order_by("-id")[:limit]
    ]


def keep(task_ids: list[int]) -> None:
    """The task-end hook's part: each ended sandbox with an allow-list gets its audit read once
    from its backend and stored (a hook run twice stores it once). A backend that cannot say
    leaves it unstored, logged; the end goes on."""
    sandboxes = (
        Sandbox.objects.filter(task_id__in=task_ids)
        .exclude(egress=[])
        .exclude(task__backend_id="")
        .select_related("task")
    )
    for sandbox in sandboxes:
        if SandboxEgress.objects.filter(sandbox=sandbox).exists():
            continue
        task = sandbox.task
        try:
            records = get_backend(task.backend).egress_audit(
                task.backend_id, limit_bytes=READ_BYTES
            )
        except (BackendError, OSError, ValueError):
            log.warning("sandbox %s: its egress audit could not be kept", sandbox.public_id)
            continue
        with transaction.atomic():
            if not SandboxEgress.objects.select_for_update().filter(sandbox=sandbox).exists():
                SandboxEgress.objects.bulk_create(_rows(sandbox, records)[-KEPT:])


def _rows(sandbox: Sandbox, records: list[dict]) -> list[SandboxEgress]:
    """proxylog's records (oldest first) as rows, hostile text cut to fit; a record whose
    time is not one is left out."""
    rows = []
    for record in records:
        try:
            at = datetime.fromisoformat(str(record.get("time", "")))
        except ValueError:
            continue
        rows.append(
            SandboxEgress(
                sandbox=sandbox,
                at=at if at.tzinfo else at.replace(tzinfo=UTC),
                method=_text(record.get("method"), 16),
                target=_text(record.get("target"), 255),
                allowed=record.get("decision") == ALLOWED,
                reason=_text(record.get("reason"), 255),
            )
        )
    return rows


def _text(value: object, size: int) -> str:
    # PostgreSQL's text holds no NUL.
    return str(value or "").replace("\x00", "\ufffd")[:size]


def _as_shown(row: SandboxEgress) -> dict[str, Any]:
    return {
        "time": row.at,
        "method": row.method,
        "target": row.target,
        "allowed": row.allowed,
        "reason": row.reason,
    }
