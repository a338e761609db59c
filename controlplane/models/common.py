"""What every capability's results share: the queue's outcomes and dedup
kinds (API.md §2-§3), and the decoding of ``jsonb`` columns for both drivers."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

__all__ = ["DedupKind", "DedupQueue", "KeylessCause", "QueueOutcome", "_json_value"]


class QueueOutcome(StrEnum):
    """What an enqueue did (``office.enqueue_result.outcome``)."""

    QUEUED = "queued"
    DEDUPED = "deduped"
    COALESCED = "coalesced"


class DedupKind(StrEnum):
    """How a ``deduped`` outcome was decided: the windowed lookup or the
    durable unique index."""

    WINDOWED = "windowed"
    DURABLE = "durable"


class DedupQueue(StrEnum):
    """The queue a dedup happened on (the ``queue`` label)."""

    RUNS = "runs"
    WAKEUP = "wakeup"


class KeylessCause(StrEnum):
    """Why a producer enqueues without a key (DOMAIN.md §2.5)."""

    UNRESOLVED = "unresolved"
    BY_DESIGN = "by_design"


def _json_value(value: Any) -> Any:
    """asyncpg hands ``jsonb`` over as text; psycopg already decodes it."""
    return json.loads(value) if isinstance(value, str) else value
