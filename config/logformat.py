"""How the portal's log lines are written: one JSON object a line, or text for a person.

`SWITCHYARD_LOG_FORMAT` picks (config/settings_logs.py). Both carry the fields of the log
context (config/logcontext.py), which `ContextFilter` puts on every record; docs/operations.md,
"Logs", lists them.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from config import logcontext

# Record attributes that are never written as fields: the request object Django's own lines
# carry (its text says nothing the message does not), and the task arguments Celery's carry.
_LEFT_OUT = ("request", "server_time", "data", "taskName")


class ContextFilter(logging.Filter):
    """Writes the log context's fields on each record, where the call did not give them
    itself (`extra={"task_id": …}` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        known = logcontext.fields()
        task_id = record.__dict__.get("task_id", known.get("task_id"))
        known = logcontext.fields_for(task_id, known) if task_id is not None else known
        for name in (*logcontext.FIELDS, *logcontext.WORKER_FIELDS):
            if name not in record.__dict__ and known.get(name) is not None:
                setattr(record, name, known[name])
        return True


class JsonFormatter(_JsonFormatter):
    """`{"timestamp", "level", "logger", "message", <the context's fields>, …}`: the time in
    UTC, ISO 8601; a traceback as `exc_info`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger"},
            reserved_attrs=[*RESERVED_ATTRS, *_LEFT_OUT],
            json_ensure_ascii=False,
            **kwargs,
        )

    def add_fields(
        self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_record["timestamp"] = _iso(record.created)
        super().add_fields(log_record, record, message_dict)


TEXT = "%(asctime)s %(levelname)s %(name)s %(context)s%(message)s"


class TextFormatter(logging.Formatter):
    """`2026-12-05 19:00:51,455 INFO scheduling.states [request=… user=alice task=42 job=17] …`"""

    LABELS = {"request_id": "request", "user": "user", "task_id": "task", "job_id": "job"}

    def __init__(self) -> None:
        super().__init__(TEXT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        known = " ".join(
            f"{label}={record.__dict__[name]}"
            for name, label in self.LABELS.items()
            if record.__dict__.get(name) is not None
        )
        return TEXT % {**record.__dict__, "context": f"[{known}] " if known else ""}


def _iso(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


def logging_config(*, fmt: str, level: str) -> dict[str, Any]:
    """Django's `LOGGING`: every line to standard error, in `fmt` ("json" or "text")."""
    formatter = (
        "config.logformat.JsonFormatter" if fmt == "json" else "config.logformat.TextFormatter"
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": "config.logformat.ContextFilter"}},
        "formatters": {"switchyard": {"()": formatter}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "filters": ["context"],
                "formatter": "switchyard",
            }
        },
        "root": {"handlers": ["console"], "level": level},
    }


def apply_to(logger: logging.Logger, *, fmt: str) -> None:
    """Give the handlers Celery set up on `logger` the portal's filter and format."""
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    for handler in logger.handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
        handler.setFormatter(formatter)
