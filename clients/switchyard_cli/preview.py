"""`switchyard submit --dry-run`: what submitting a task would do, from the portal's
`POST /api/v1/tasks/preview/`, as a person reads it (docs/cli.md). Nothing is stored."""

from __future__ import annotations

from datetime import UTC, datetime

_INDENT = " " * 9


def preview_text(preview: dict) -> str:
    """The preview, a fact a line: type, queue and why, each quota with its room, and when
    it could start; a refusal's errors are printed by the caller, as any command's are."""
    lines = ["dry run: nothing is submitted"]
    if preview.get("type") is not None:
        how = "declared" if preview.get("type_declared") else "guessed"
        lines.append(f"type:    {preview['type']} ({how})")
        lines.append(f"{_INDENT}{preview.get('classify_reason', '')}")
        lines += [f"{_INDENT}or declare {o['advice']}" for o in preview.get("other_types", [])]
        lines.append(f"queue:   {preview.get('queue') or 'none takes it'}")
        lines.append(f"{_INDENT}{preview.get('routing_reason', '')}")
    if preview.get("admission") is not None:
        rooms = [q["text"] for q in preview.get("quotas", [])] + [preview["admission"]]
        lines.append(f"quotas:  {rooms[0]}")
        lines += [f"{_INDENT}{room}" for room in rooms[1:]]
        lines.append(f"start:   {_start(preview)}")
    if preview.get("canary"):
        lines.append(f"note:    {preview['canary']}")
    if preview.get("accepted"):
        lines.append("it would be accepted: submitting it stores it as shown")
    else:
        lines.append("it would be refused, as follows:")
    return "\n".join(lines)


def _start(preview: dict) -> str:
    start = preview.get("start")
    if preview.get("held") or not start:
        return "waits for its quota first; no estimate until it has room"
    if start.get("at_once"):
        when = "at once: the pool has room for it now"
    elif start.get("by"):
        when = f"could start by {_utc(start['by'])} at the latest"
    else:
        when = "no estimate: the pool waits on work without a walltime"
    position, waiting = start.get("position"), start.get("waiting", 0)
    if position == 1:
        return f"{when}\n{_INDENT}next to start among the queue's tasks waiting to start"
    return f"{when}\n{_INDENT}{position} of {waiting + 1} among the queue's tasks waiting to start"


def _utc(stamp: str) -> str:
    try:
        at = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp  # a portal's own format: shown as it came
    if at.tzinfo is not None:
        at = at.astimezone(UTC)
    return at.strftime("%Y-%m-%d %H:%M UTC")
