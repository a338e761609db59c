"""Logging for ``officectl run``: stdlib logging, as text or as JSON lines.

The library logs carry their fields as ``extra`` (docs/domain.md §4: ``queue``,
``reason``, ``key``, ...); both formats show them: the text format appends
``name=value`` pairs, the JSON format makes them keys of the object.

A thread that works on one shard of a proxy (a daemon loop, a worker's
listener) says so once with :func:`set_shard`: every record it logs from
then on, the library's included, carries a ``shard`` field.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = [
    "JsonFormatter",
    "ShardField",
    "TextFormatter",
    "configure_logging",
    "record_fields",
    "set_shard",
]

# The attributes every LogRecord has; anything else was passed as ``extra``.
_STANDARD = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


_thread = threading.local()


def set_shard(shard: str | None) -> None:
    """The records this thread logs from now on name ``shard`` (None: none)."""
    _thread.shard = shard


class ShardField(logging.Filter):
    """Adds the ``shard`` of the logging thread (:func:`set_shard`) to a record
    that does not name one."""

    def filter(self, record: logging.LogRecord) -> bool:
        shard = getattr(_thread, "shard", None)
        if shard is not None and not hasattr(record, "shard"):
            record.shard = shard
        return True


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of a record."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _plain(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC, ISO 8601), ``level``,
    ``logger``, ``message``, the record's extra fields, and ``exc`` (the
    traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record_fields(record).items():
            document.setdefault(name, _plain(value))
        if record.exc_info:
            document["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``2026-01-01T00:00:00.000Z INFO logger: message name=value ...``."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        text = f"{stamp.replace('+00:00', 'Z')} {super().format(record)}"
        fields = record_fields(record)
        if fields:
            pairs = " ".join(
                f"{k}={json.dumps(_plain(v), ensure_ascii=False)}" for k, v in fields.items()
            )
            first, newline, rest = text.partition("\n")
            text = f"{first} {pairs}{newline}{rest}"
        return text


def configure_logging(
    log_format: str = "text", level: int | str = logging.INFO, stream: TextIO | None = None
) -> None:
    """Route every log record to ``stream`` (default stderr) in ``log_format``
    (``text`` or ``json``), replacing the root logger's handlers."""
    if log_format not in ("text", "json"):
        raise ValueError(f"unknown log format {log_format!r} (expected text or json)")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(ShardField())
    logging.basicConfig(level=level, handlers=[handler], force=True)
